// Package metricsdoc checks METRICS.md against the code in tests.
package metricsdoc

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	metricRow = regexp.MustCompile("^\\| `([a-z_]+)` \\|")
	// labelValues is a label with the values the doc lists for it:
	// "`decision` (`pending`, `exempt`)".
	labelValues = regexp.MustCompile("`([a-z_]+)` \\(([^)]*)\\)")
)

// RequireLabelValues checks that the label values listed in a section
// ("## Exporter metrics") of the doc at path are exactly want's, keyed
// "metric label", and that the doc lists values of no other label.
func RequireLabelValues(t *testing.T, path, section string, want map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	got := map[string][]string{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == section
		}
		row := metricRow.FindStringSubmatch(line)
		if !in || row == nil {
			continue
		}
		for _, m := range labelValues.FindAllStringSubmatch(line, -1) {
			var values []string
			for _, v := range strings.Split(m[2], ",") {
				values = append(values, strings.Trim(strings.TrimSpace(v), "`"))
			}
			got[row[1]+" "+m[1]] = values
		}
	}
	for k, vs := range want {
		require.ElementsMatch(t, vs, got[k], "%s lists these values of %s", path, k)
	}
	for k := range got {
		require.Contains(t, want, k, "%s lists values of %s; give the test the code's list", path, k)
	}
}
