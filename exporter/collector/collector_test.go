package collector_test

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// demoAt is the fixed scenario time of the golden scrape: the notebook on
// GPU 2 has been idle for 15 minutes, the trainer on GPU 0 is busy.
const demoAt = 20 * time.Minute

// demoRegistry samples the demo node at demoAt and registers every collector.
func demoRegistry(t testing.TB) (*prometheus.Registry, *samplertest.Node) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	n.SampleAt(t, demoAt, 10*time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector.All(n.Sampler, n.Clock.Now)...)
	return reg, n
}

// stableScrape is the demo scrape without the series whose values depend on
// how fast this machine is.
func stableScrape(t *testing.T, reg prometheus.Gatherer) []byte {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if mf.GetName() == "gpureclaim_exporter_collector_duration_seconds" {
			for _, m := range mf.Metric {
				m.Gauge.Value = new(float64) // the labels stay pinned, the value does not
			}
		}
		require.NoError(t, enc.Encode(mf))
	}
	return buf.Bytes()
}

// goldenScrape compares a scrape with testdata/name (rewritten with -update).
func goldenScrape(t *testing.T, name string, got []byte) {
	t.Helper()
	golden := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "run go test ./exporter/collector -update and review the diff")
}

// promtoolClean runs promtool check metrics on a scrape: no error, no lint finding.
func promtoolClean(t *testing.T, scrape []byte) {
	t.Helper()
	cmd := exec.Command(tooltest.Bin(t, "promtool"), "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "promtool's lint findings")
}

func TestDemoScrapeGolden(t *testing.T) {
	reg, _ := demoRegistry(t)
	goldenScrape(t, "demo.prom", stableScrape(t, reg))
}

func TestDemoScrapePassesPromtool(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "demo.prom"))
	require.NoError(t, err)
	promtoolClean(t, b)
}

func TestEveryCollectorLints(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	n.SampleAt(t, demoAt, 10*time.Second)
	for _, c := range collector.All(n.Sampler, n.Clock.Now) {
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		require.Empty(t, problems, "%T", c)
		require.NotZero(t, testutil.CollectAndCount(c), "%T exports nothing on the demo node", c)
	}
}

func TestNothingBeforeTheFirstSample(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	for _, c := range collector.All(n.Sampler, n.Clock.Now) {
		require.Zero(t, testutil.CollectAndCount(c), "%T", c)
	}
}

func TestDemoShowsEveryCase(t *testing.T) {
	reg, n := demoRegistry(t)
	snap := n.Sampler.Latest()
	uuid := func(i int) string { return snap.GPUs[i].UUID }
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.Metric {
				for _, lp := range m.Label {
					if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
						continue next
					}
				}
				if m.Gauge != nil {
					return m.Gauge.GetValue()
				}
				return m.Counter.GetValue()
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	// busy training, on SM activity
	require.InDelta(t, 0.92, value("gpureclaim_unit_sm_active_ratio", map[string]string{"uuid": uuid(0)}), 1e-9)
	require.InDelta(t, 0.88, value("gpureclaim_unit_sm_active_ratio", map[string]string{"uuid": uuid(1)}), 1e-9)
	require.Equal(t, 1.0, value("gpureclaim_unit_owner_info", map[string]string{"uuid": uuid(1), "user": "bob", "slurm_job": "4242"}))
	// held but idle: a pod holds 30 GiB and does nothing
	require.Zero(t, value("gpureclaim_unit_sm_active_ratio", map[string]string{"uuid": uuid(2)}))
	require.Equal(t, float64(30<<30), value("gpureclaim_unit_owner_memory_used_bytes", map[string]string{"uuid": uuid(2), "namespace": "data-science", "pod": "notebook-carol", "container": "notebook"}))
	// wasted: utilization says busy, SM activity says otherwise
	require.Equal(t, 1.0, value("gpureclaim_unit_utilization_ratio", map[string]string{"uuid": uuid(3)}))
	require.InDelta(t, 0.08, value("gpureclaim_unit_sm_active_ratio", map[string]string{"uuid": uuid(3)}), 1e-9)
	// MIG: four instances, the 3g.40gb holding 7 GiB
	require.Equal(t, 1.0, value("gpureclaim_gpu_mig_mode_enabled", map[string]string{"gpu_uuid": uuid(4)}))
	require.Len(t, snap.GPUs[4].Units, 4)
	big := snap.GPUs[4].Units[0]
	require.Equal(t, "3g.40gb", big.MIG.Profile)
	require.Equal(t, float64(7<<30), value("gpureclaim_unit_memory_used_bytes", map[string]string{"uuid": big.UUID}))
	require.Equal(t, 1.0, value("gpureclaim_unit_owner_info", map[string]string{"uuid": big.UUID, "pod": "embed-train-0"}))
	// MPS: a server, three tenants, memory nearly full
	require.Equal(t, 1.0, value("gpureclaim_gpu_mps_server_running", map[string]string{"gpu_uuid": uuid(5)}))
	require.Equal(t, 3.0, value("gpureclaim_gpu_mps_clients", map[string]string{"gpu_uuid": uuid(5)}))
	require.Len(t, snap.GPUs[5].Units[0].Holders, 3)
	used := value("gpureclaim_unit_memory_used_bytes", map[string]string{"uuid": uuid(5)})
	total := value("gpureclaim_unit_memory_total_bytes", map[string]string{"uuid": uuid(5)})
	require.Greater(t, used/total, 0.95)
	// free
	for _, i := range []int{6, 7} {
		require.Zero(t, value("gpureclaim_unit_processes", map[string]string{"uuid": uuid(i)}))
		require.Empty(t, snap.GPUs[i].Units[0].Holders)
	}
}

func TestSnapshotGathererRefreshesOncePerSample(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	n.SampleAt(t, demoAt, 10*time.Second)
	g, err := collector.NewSnapshotGatherer(n.Sampler, collector.FromSnapshot(n.Sampler)...)
	require.NoError(t, err)
	first, err := g.Gather()
	require.NoError(t, err)
	again, err := g.Gather()
	require.NoError(t, err)
	require.Same(t, first[0], again[0], "same snapshot, same families")

	require.True(t, n.Kill(61234))
	n.SampleAt(t, demoAt+time.Minute, 10*time.Second)
	fresh, err := g.Gather()
	require.NoError(t, err)
	require.NotSame(t, first[0], fresh[0])
	count := func(mfs []*dto.MetricFamily, name string) float64 {
		for _, mf := range mfs {
			if mf.GetName() == name {
				sum := 0.0
				for _, m := range mf.Metric {
					sum += m.Gauge.GetValue()
				}
				return sum
			}
		}
		return -1
	}
	require.Equal(t, count(first, "gpureclaim_unit_processes")-1, count(fresh, "gpureclaim_unit_processes"))
}
