package promquery

import (
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// A holder's values stay string literals, whatever they hold.
func TestHolderQuery(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder map[string]string
		want   string
	}{
		{"a pod", map[string]string{"namespace": "ml", "pod": "train-0"}, `gpureclaim_unit_owner_info{uuid="GPU-1",namespace="ml",pod="train-0"}`},
		{"a Slurm job", map[string]string{"user": "bob", "slurm_job": "42"}, `gpureclaim_unit_owner_info{uuid="GPU-1",user="bob",slurm_job="42"}`},
		{"a hostile value", map[string]string{"pod": `x"} or vector(1) or {a="`}, `gpureclaim_unit_owner_info{uuid="GPU-1",pod="x\"} or vector(1) or {a=\""}`},
		{"a backslash and a newline", map[string]string{"user": "a\\b\nc"}, `gpureclaim_unit_owner_info{uuid="GPU-1",user="a\\b\nc"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := HolderQuery("GPU-1", tc.holder)
			require.Equal(t, tc.want, q)
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
			require.NoError(t, err)
			vs, ok := expr.(*parser.VectorSelector)
			require.True(t, ok, "one selector, nothing more: %T", expr)
			for k, v := range tc.holder {
				found := false
				for _, m := range vs.LabelMatchers {
					found = found || (m.Name == k && m.Value == v)
				}
				require.True(t, found, "%s=%q matched as it is", k, v)
			}
		})
	}
}
