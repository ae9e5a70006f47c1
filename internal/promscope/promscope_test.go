package promscope

import (
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

func TestScope(t *testing.T) {
	inA := labels.MustNewMatcher(labels.MatchEqual, "cluster", "a")
	for _, tc := range []struct{ name, in, want string }{
		{"a selector", `gpureclaim_unit_owner_info{pod="nb"}`, `gpureclaim_unit_owner_info{cluster="a",pod="nb"}`},
		{"every selector, in ranges and subqueries",
			`max(max_over_time(timestamp((x > 0.05) and on (uuid) y{pod="p"})[1h:1m])) + rate(z[5m])`,
			`max(max_over_time(timestamp((x{cluster="a"} > 0.05) and on (uuid) y{cluster="a",pod="p"})[1h:1m])) + rate(z{cluster="a"}[5m])`},
		{"a selector that names the cluster is left alone", `x{cluster="b"}`, `x{cluster="b"}`},
		{"no selector", `vector(1)`, `vector(1)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Scope(tc.in, inA)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Scope(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
		})
	}
	if got, _ := Scope("x{", nil); got != "x{" {
		t.Errorf("without a matcher the query is not touched, got %q", got)
	}
	if _, err := Scope("x{", inA); err == nil {
		t.Error("a query that does not parse gave no error")
	}
}
