package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/metricsdoc"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/web"
)

var docRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| (gauge|counter|histogram) \\|[^|]*\\|([^|]*)\\|")

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// The label values METRICS.md lists are the typed values the code uses.
func TestMetricsDocListsTheLabelValues(t *testing.T) {
	want := map[string][]string{
		"gpureclaim_reclaimer_alerts_received_total status": reclaim.AlertStatuses,
		"gpureclaim_reclaimer_decisions_total decision":     strs(reclaim.Decisions),
		"gpureclaim_reclaimer_messages_total kind":          strs(reclaim.MessageKinds),
		"gpureclaim_reclaimer_messages_total result":        strs(reclaim.MessageResults),
		"gpureclaim_reclaimer_actions_total action":         strs(config.FreeingActions),
		"gpureclaim_reclaimer_actions_total result":         strs(reclaim.ActionResults),
		"gpureclaim_reclaimer_reclaims state":               strs(reclaim.States),
		"gpureclaim_reclaimer_errors_total component":       strs(reclaim.Components),
		"gpureclaim_reclaimer_fenced_total what":            strs(reclaim.FencedKinds),
	}
	metricsdoc.RequireLabelValues(t, "../METRICS.md", "## Reclaimer metrics", want)
}

// docRows are the rows of METRICS.md's reclaimer table.
func docRows(t *testing.T) [][]string {
	b, err := os.ReadFile("../METRICS.md")
	require.NoError(t, err)
	var rows [][]string
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
		}
		if m := docRow.FindStringSubmatch(line); m != nil && section == "## Reclaimer metrics" {
			rows = append(rows, m)
		}
	}
	return rows
}

func TestMetricsDocMatchesTheReclaimer(t *testing.T) {
	doc := map[string]string{}
	for _, m := range docRows(t) {
		doc[m[1]] = m[2]
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpureclaim_reclaimer"))
	m := lifecycle.NewMetrics(reg)
	m.Error(reclaim.ComponentStore) // a vector shows only once it has a child
	web.New(web.Options{Config: reclaimtest.Config(t, ""), Registry: reg})
	newFront(reg)

	descs := make(chan *prometheus.Desc, 100)
	reg.Describe(descs)
	close(descs)
	got := map[string]bool{}
	for d := range descs {
		name := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1]
		got[name] = true
		require.Contains(t, doc, name, "add %s to METRICS.md", name)
	}
	for name := range doc {
		require.True(t, got[name], "METRICS.md lists %s, which the reclaimer does not serve", name)
	}
}
