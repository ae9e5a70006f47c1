package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/web"
)

var docRow = regexp.MustCompile("^\\| `([a-z_]+)` \\| (gauge|counter|histogram) \\|")

func TestMetricsDocMatchesTheReclaimer(t *testing.T) {
	b, err := os.ReadFile("../METRICS.md")
	require.NoError(t, err)
	doc := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = line
		}
		if m := docRow.FindStringSubmatch(line); m != nil && section == "## Reclaimer metrics" {
			doc[m[1]] = m[2]
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpureclaim_reclaimer"))
	m := reclaim.NewMetrics(reg)
	m.Error("store") // a vector shows only once it has a child
	web.New(web.Options{Config: reclaimtest.Config(t, ""), Registry: reg})

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
