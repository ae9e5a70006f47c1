package config

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func patchErrors(patch map[string]any) []error {
	c := &checker{}
	checkPatch(c, "workloads[0].stop", patch)
	return c.errs
}

// The built-in kinds' patches are what the checks allow, and each restore
// undoes its stop.
func TestBuiltinPatchesPassTheChecks(t *testing.T) {
	for _, w := range BuiltinWorkloads() {
		if w.Scale {
			continue
		}
		c := &checker{}
		w.validate(c, "workloads."+w.Name)
		require.Empty(t, c.errs, w.Name)
	}
}

func TestPatchSizeIsBounded(t *testing.T) {
	big := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"x": strings.Repeat("y", maxPatchBytes)}}}
	errs := patchErrors(big)
	require.Len(t, errs, 1)
	require.ErrorContains(t, errs[0], "workloads[0].stop: is 65573 bytes; a stop or restore patch is at most 65536")
}

// FuzzPatchCheck: whatever a config writes, the check does not panic, and
// a patch it accepts touches only fields under spec and annotation or label
// keys, and is at most 64 KiB.
func FuzzPatchCheck(f *testing.F) {
	for _, s := range []string{`{"spec":{"suspend":true}}`, `{"spec":null}`, `{"metadata":{"name":"x"}}`, `{"metadata":{"annotations":{"a":null}}}`,
		`{"status":{}}`, `{"spec":5}`, `{"metadata":{"labels":[]}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var patch map[string]any
		if json.Unmarshal([]byte(s), &patch) != nil || patch == nil {
			return
		}
		if len(patchErrors(patch)) > 0 {
			return
		}
		b, _ := json.Marshal(patch)
		require.LessOrEqual(t, len(b), maxPatchBytes)
		for k, v := range patch {
			require.Contains(t, []string{"spec", "metadata"}, k)
			m, ok := v.(map[string]any)
			require.True(t, ok && len(m) > 0, "%s is a non-empty object", k)
			if k == "metadata" {
				for mk, mv := range m {
					require.Contains(t, []string{"annotations", "labels"}, mk)
					am, ok := mv.(map[string]any)
					require.True(t, ok && len(am) > 0)
				}
			}
		}
	})
}
