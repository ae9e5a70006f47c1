package config

import (
	"testing"

	promql "github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

func restorePolicy(t testing.TB, when string) (*Policy, error) {
	t.Helper()
	p := &Policy{Name: "p", Action: ActionAuto}
	return p, p.SetRestoreWhen(when)
}

// selectorValue is the value the query's one selector matches label on.
func selectorValue(t testing.TB, q, label string) string {
	t.Helper()
	expr, err := promql.NewParser(promql.Options{}).ParseExpr(q)
	require.NoError(t, err, q)
	var got []string
	promql.Inspect(expr, func(n promql.Node, _ []promql.Node) error {
		if vs, ok := n.(*promql.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == label {
					got = append(got, m.Value)
				}
			}
		}
		return nil
	})
	require.Len(t, got, 1, q)
	return got[0]
}

// A label value reaches PromQL only as the string it is: none of these
// leaves its literal or breaks the query.
func TestRestoreQueryKeepsValuesInTheirLiteral(t *testing.T) {
	p, err := restorePolicy(t, `sum(rate(requests_total{namespace="{{ .namespace }}", service="{{ .workload_name }}"}[1m])) > 0`)
	require.NoError(t, err)
	for _, v := range []string{
		`x"}[1m])) > 0 or vector(1) or sum(rate(requests_total{team="`,
		`back\slash`,
		"new\nline",
		"tab\tand \x00 nul",
		`'single' and ` + "`back`",
		"ünïcödé",
		"",
	} {
		q, err := p.RestoreQuery(RestoreData{"namespace": v, RestoreWorkloadName: "api"})
		require.NoError(t, err, v)
		require.Equal(t, v, selectorValue(t, q, "namespace"), "the value %q stays one string", v)
		expr, err := promql.NewParser(promql.Options{}).ParseExpr(q)
		require.NoError(t, err)
		require.Equal(t, `sum(rate(requests_total{namespace="",service="api"}[1m])) > 0`, withEmpty(expr, "namespace"), "nothing of the value is code")
	}
}

// withEmpty prints a query with label's values emptied: the query's shape.
func withEmpty(expr promql.Expr, label string) string {
	promql.Inspect(expr, func(n promql.Node, _ []promql.Node) error {
		if vs, ok := n.(*promql.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == label {
					m.Value = ""
				}
			}
		}
		return nil
	})
	return expr.String()
}

func TestRestoreWhenChecks(t *testing.T) {
	for _, tc := range []struct{ when, err string }{
		{`up{pod="{{ .pod }}"} > 0`, ""},
		{`up{pod="{{ $.pod }}"} > 0`, ""},
		{`{{ if .pod }}up{pod="{{ .pod }}"}{{ else }}up{pod=""}{{ end }}`, ""},
		{`up{pod={{ .pod }}} > 0`, "put each {{ .label }} inside a double-quoted string"},
		{`up{pod='{{ .pod }}'} > 0`, "put each {{ .label }} inside a double-quoted string"},
		{"up{pod=`{{ .pod }}`} > 0", "put each {{ .label }} inside a double-quoted string"},
		{`up{pod="x"} > 0 or vector({{ .value }})`, "put each {{ .label }} inside a double-quoted string"},
		{`{{ if .pod }}up{pod="{{ .pod }}"}{{ else }}up{{ end }} or`, "not PromQL"},
		{`{{ if .pod }}up{pod="{{ .pod }}"}{{ else }}up{pod=}{{ end }}`, "rendered with empty label values"},
		{`scalar(up{pod="{{ .pod }}"})`, "is a scalar"},
	} {
		_, err := restorePolicy(t, tc.when)
		if tc.err == "" {
			require.NoError(t, err, tc.when)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.when)
	}
}

// FuzzRestoreQuery: whatever a label holds, the query parses and matches
// exactly it.
func FuzzRestoreQuery(f *testing.F) {
	for _, s := range []string{`x"}) or vector(1) or ({a="`, `\`, "\n", "'", "`", "\xff"} {
		f.Add(s)
	}
	p, err := restorePolicy(f, `app_queue_length{namespace="{{ .namespace }}"} > 0`)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, v string) {
		q, err := p.RestoreQuery(RestoreData{"namespace": v})
		require.NoError(t, err, "%q", v)
		require.Equal(t, v, selectorValue(t, q, "namespace"))
	})
}
