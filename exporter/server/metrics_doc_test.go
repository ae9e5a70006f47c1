package server

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/action"
	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/testkit/metricsdoc"
)

var docRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| (gauge|counter|histogram|summary) \\|.*\\| ([^|]*) \\|$")

// documented reads METRICS.md's table: metric name → (type, availability).
func documented(t *testing.T) map[string][2]string {
	b, err := os.ReadFile("../../METRICS.md")
	require.NoError(t, err)
	out := map[string][2]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
		}
		if section != "## Exporter metrics" {
			continue
		}
		if m := docRow.FindStringSubmatch(line); m != nil {
			require.NotContains(t, out, m[1], "listed twice")
			out[m[1]] = [2]string{m[2], strings.TrimSpace(m[3])}
		}
	}
	require.NotEmpty(t, out)
	return out
}

// The label values METRICS.md lists are the values the code uses.
func TestMetricsDocListsTheLabelValues(t *testing.T) {
	want := map[string][]string{
		"gpureclaim_unit_info kind":                       names.Kinds,
		"gpureclaim_exporter_collector_success collector": sampler.Steps,
		"gpureclaim_exporter_actions_total result":        action.Results,
	}
	metricsdoc.RequireLabelValues(t, "../../METRICS.md", "## Exporter metrics", want)
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func TestMetricsDocMatchesTheExporter(t *testing.T) {
	doc := documented(t)
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	n.SampleAt(t, 20*time.Minute, 10*time.Second)
	reg, _, err := gatherer(n.Sampler, n.Clock.Now, nil)
	require.NoError(t, err)

	// Everything a collector can emit is documented...
	descs := make(chan *prometheus.Desc, 1000)
	withAction := prometheus.NewRegistry()
	action.New(action.Config{}, n.Sampler, nil, nil, withAction)
	for _, c := range append(collector.FromSnapshot(n.Sampler), append(liveCollectors(n.Sampler, n.Clock.Now), withAction)...) {
		c.Describe(descs)
	}
	close(descs)
	described := map[string]bool{}
	for d := range descs {
		name := descName.FindStringSubmatch(d.String())[1]
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		described[name] = true
		require.Contains(t, doc, name, "add %s to METRICS.md", name)
	}
	// ...and everything documented exists.
	for name := range doc {
		require.True(t, described[name], "METRICS.md lists %s, which no collector emits", name)
	}

	// The demo scrape emits every documented metric, with its documented type,
	// except those that appear only on failure.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	scraped := map[string]bool{}
	for _, mf := range mfs {
		name := mf.GetName()
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		scraped[name] = true
		require.Equal(t, doc[name][0], strings.ToLower(mf.GetType().String()), "type of %s", name)
	}
	var missing []string
	for name, d := range doc {
		if !scraped[name] && !strings.Contains(d[1], "only") {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "documented but not in the demo scrape")
}
