package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/ruleeval"
)

// The relabeling is Prometheus's own hashmod: it spreads targets over
// every shard, each target in one.
func TestShardRelabeling(t *testing.T) {
	rcs := relabeling(t, 8)
	seen := map[string]int{}
	for i := range 400 {
		lb := labels.NewBuilder(labels.FromStrings("__address__", fmt.Sprintf("gpu-node-%d:9847", i)))
		require.True(t, relabel.ProcessBuilder(lb, rcs...))
		seen[lb.Get(names.LabelShard)]++
	}
	require.Len(t, seen, 8)
	for k := range 8 {
		require.Greater(t, seen[ShardName(k)], 20, "shard %d", k)
	}
}

func relabeling(t *testing.T, n int) []*relabel.Config {
	var rcs []*relabel.Config
	require.NoError(t, yaml.Unmarshal([]byte(ShardRelabeling(n)), &rcs))
	for _, rc := range rcs {
		require.NoError(t, rc.Validate(model.UTF8Validation))
	}
	return rcs
}

// Sharded rules compute what the unsharded ones do: every record and
// alert of a small fleet, over 80 minutes, is the same series with the
// same value, but for the shard label.
func TestShardsComputeTheSame(t *testing.T) {
	unsharded := fleetRuleFile(t, 1)
	names := recordNames(t, unsharded)
	one := evalFleet(t, unsharded, names, nil)
	eight := evalFleet(t, fleetRuleFile(t, 8), names, relabeling(t, 8))
	require.NotEmpty(t, one)
	for name := range one {
		require.NotEmpty(t, one[name], "%s: the fleet exercises it", name)
	}
	require.Equal(t, one, eight)
}

// fleetRuleFile writes the rules, in shards, with the windows the small
// fleet's 80 minutes fill.
func fleetRuleFile(t *testing.T, shards int) string {
	c := DefaultConfig()
	c.Shards = shards
	c.MIG.PeakWindow = dur(time.Hour)
	c.Packing.Window, c.Packing.Step, c.Packing.Evidence = dur(time.Hour), dur(time.Minute), dur(30*time.Minute)
	return writeRuleFile(t, filepath.Join(t.TempDir(), "rules.yml"), Generate(c).Groups...)
}

// writeRuleFile renders rule groups into a file at path.
func writeRuleFile(t *testing.T, path string, groups ...Group) string {
	b, err := render(File{Groups: groups})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// evalFleet replays a small fleet through a rule file, its targets
// relabeled by rcs but one, and returns, per record (and ALERTS), its
// series at the end without the shard label.
func evalFleet(t *testing.T, file string, records []string, rcs []*relabel.Config, clusters ...string) map[string][]string {
	if clusters == nil {
		clusters = []string{""}
	}
	ev, err := ruleeval.New(t.TempDir(), time.Minute, file)
	require.NoError(t, err)
	defer ev.Close()
	for m := range fleetMinutes {
		ts := fleetStart.Add(time.Duration(m) * time.Minute)
		app := ev.Appender()
		fleetSeries(rcs, clusters, func(ls labels.Labels, v float64) {
			_, err := app.Append(0, ls, ts.UnixMilli(), v)
			require.NoError(t, err)
		})
		require.NoError(t, app.Commit())
		require.NoError(t, ev.Eval(ts))
	}
	out := map[string][]string{}
	end := fleetStart.Add((fleetMinutes - 1) * time.Minute)
	for _, name := range append(records, "ALERTS") {
		v, err := ev.Query(name, end)
		require.NoError(t, err)
		var got []string
		for _, s := range v {
			ls := labels.NewBuilder(s.Metric).Del(names.LabelShard).Labels()
			// Sums over shards add in another order: the last bits differ.
			got = append(got, fmt.Sprintf("%s %.12g", ls, s.F))
		}
		sort.Strings(got)
		out[name] = got
	}
	return out
}

// The small fleet's replay: its start and length, a sample a minute.
var fleetStart = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const fleetMinutes = 80

// fleetSeries gives add one minute's samples of a small fleet (idle,
// busy, shared and MIG units, a pending pod), in each of the clusters (""
// for series without the cluster label), its targets relabeled by rcs but
// one. The clusters hold the same units, nodes and pods.
func fleetSeries(rcs []*relabel.Config, clusters []string, add func(labels.Labels, float64)) {
	type unit struct {
		uuid, gpu, kind, profile, node string
		owners                         []string
		activity                       float64
		slices                         int
	}
	var units []unit
	for i := range 24 {
		sum := sha256.Sum256([]byte(fmt.Sprint(i)))
		gpu := "GPU-" + hex.EncodeToString(sum[:16])
		u := unit{uuid: gpu, gpu: gpu, kind: "gpu", node: fmt.Sprintf("n%d", i/2), activity: []float64{0, 0.9, 0.1, 0.6}[i%4]}
		switch i % 6 {
		case 0:
		case 1:
			u.owners = []string{"serve/a-" + fmt.Sprint(i), "serve/b-" + fmt.Sprint(i)}
		default:
			u.owners = []string{fmt.Sprintf("team-%d/pod-%d", i%3, i)}
		}
		if i%5 == 4 {
			u.uuid, u.kind, u.profile, u.slices = "MIG-"+hex.EncodeToString(sum[16:]), "mig", "3g.40gb", 3
		}
		units = append(units, u)
	}
	// A node scraped without the relabeling: the group of unlabeled series takes it.
	units = append(units, unit{uuid: "gpu0", gpu: "gpu0", kind: "gpu", node: "unlabeled", owners: []string{"odd/pod-0"}})
	for _, cluster := range clusters {
		in := func(ls labels.Labels) labels.Labels {
			if cluster == "" {
				return ls
			}
			return labels.NewBuilder(ls).Set(names.LabelCluster, cluster).Labels()
		}
		for _, u := range units {
			target := labels.NewBuilder(labels.FromStrings("__address__", u.node+":9847"))
			if u.node != "unlabeled" {
				relabel.ProcessBuilder(target, rcs...)
			}
			put := func(v float64, kv ...string) {
				b := labels.NewBuilder(labels.FromStrings(append(kv, "job", names.ExporterJob, "instance", u.node+":9847")...))
				if s := target.Get(names.LabelShard); s != "" {
					b.Set(names.LabelShard, s)
				}
				add(in(b.Labels()), v)
			}
			base := []string{"uuid", u.uuid, "gpu_uuid", u.gpu}
			put(1, append([]string{"__name__", "gpureclaim_unit_info", "node", u.node, "kind", u.kind, "gpu_index", "0", "model", "H100", "mig_profile", u.profile}, base...)...)
			put(u.activity, append([]string{"__name__", "gpureclaim_unit_sm_active_ratio"}, base...)...)
			total, used := 80e9, 0.0
			if u.kind == "mig" {
				total = 40e9
			}
			if len(u.owners) > 0 {
				used = 0.97 * total
				switch {
				case u.kind == "mig":
					used = 5e9 // fits a smaller profile
				case u.activity == 0.1:
					used = 0.2 * total // fits a MIG slice, and could share
				}
			}
			if u.kind == "gpu" {
				put(0, "__name__", "gpureclaim_gpu_mig_mode_enabled", "gpu_uuid", u.gpu)
			}
			put(used, append([]string{"__name__", "gpureclaim_unit_memory_used_bytes"}, base...)...)
			put(total, append([]string{"__name__", "gpureclaim_unit_memory_total_bytes"}, base...)...)
			for _, o := range u.owners {
				ns, pod, _ := strings.Cut(o, "/")
				put(1, append([]string{"__name__", "gpureclaim_unit_owner_info", "namespace", ns, "pod", pod, "container", "c", "user", "", "slurm_job", "", "keep", "false"}, base...)...)
			}
			if u.kind == "mig" {
				put(float64(u.slices), append([]string{"__name__", "gpureclaim_mig_instance_slices"}, base...)...)
				for _, p := range []struct {
					name   string
					slices int
					gb     float64
				}{{"1g.10gb", 1, 10}, {"2g.20gb", 2, 20}, {"3g.40gb", 3, 40}} {
					put(p.gb*1e9, append([]string{"__name__", "gpureclaim_mig_profile_memory_bytes", "profile", p.name}, base...)...)
					put(float64(p.slices), append([]string{"__name__", "gpureclaim_mig_profile_slices", "profile", p.name}, base...)...)
				}
			}
		}
		// kube-state-metrics: a pending pod that waits for two GPUs.
		for v, kv := range map[float64][]string{
			2: {"__name__", "kube_pod_container_resource_requests", "namespace", "ml", "pod", "waiting-0", "container", "c", "resource", "nvidia_com_gpu", "unit", "integer"},
			1: {"__name__", "kube_pod_status_phase", "namespace", "ml", "pod", "waiting-0", "uid", "w0", "phase", "Pending"},
		} {
			add(in(labels.FromStrings(append(kv, "job", "kube-state-metrics", "instance", "ksm:8080")...)), v)
		}
	}
}

func recordNames(t *testing.T, file string) []string {
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	seen := map[string]bool{}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(l), "- record: "); ok && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// Split across files, a sharded fleet's rules keep every group once, in
// order, each file loadable alone.
func TestRenderSplit(t *testing.T) {
	c := DefaultConfig()
	c.Shards = 8
	files, err := RenderSplit(c, 3)
	require.NoError(t, err)
	require.Len(t, files, 4, "8 shards, the unlabeled series, the fleet and the exporter: 11 groups, 3 a file")
	var got []string
	for _, b := range files {
		var f File
		require.NoError(t, yaml.Unmarshal(b, &f))
		require.LessOrEqual(t, len(f.Groups), 3)
		for _, g := range f.Groups {
			got = append(got, g.Name)
		}
	}
	var want []string
	for _, g := range Generate(c).Groups {
		want = append(want, g.Name)
	}
	require.Equal(t, want, got)
}

// The idle classes read kube-state-metrics, whose series belong to no
// node's shard: every shard reads them whole, and its own units' records.
func TestShardsReadKubeStateMetricsWhole(t *testing.T) {
	c, err := Load("classes.yaml")
	require.NoError(t, err)
	c.Shards = 4
	var classRecords int
	for _, g := range Generate(c).Groups {
		for _, r := range g.Rules {
			if r.Record != names.RecOwnerClass {
				continue
			}
			classRecords++
			require.NotRegexp(t, `kube_pod_\w+\{[^}]*`+names.LabelShard, string(r.Expr))
			require.Regexp(t, regexp.QuoteMeta(names.RecHeld)+`\{[^}]*`+names.LabelShard, string(r.Expr))
		}
	}
	require.Equal(t, 5, classRecords, "one per shard and one for the unlabeled series")
}
