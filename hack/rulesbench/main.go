// Command rulesbench measures what gpureclaim's rules cost a real
// Prometheus at fleet size: it writes a TSDB block holding a day of the
// exporter's series for a simulated fleet (whole GPUs, MIG slices, shared
// units; idle, busy, wasted and intermittent), starts the pinned Prometheus
// on it with the rules, and reads Prometheus's own figures: each group's
// evaluation time (/api/v1/rules) and the head series the rules add
// (/api/v1/status/tsdb). With -victoria-metrics it imports the same
// history into VictoriaMetrics and has vmalert evaluate the rules over it
// instead; with -thanos, Thanos Ruler evaluates them through Thanos Query
// over a sidecar beside that Prometheus; -clusters spreads the nodes over clusters, as a fleet's engine
// holds them. `make bench-rules` runs it; BENCHMARKS.md has the figures.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/rules"
)

func main() {
	gpus := flag.Int("gpus", 1000, "GPUs in the simulated fleet (8 per node; every tenth in MIG mode with 4 instances)")
	rules := flag.String("rules", "rules/gpureclaim.rules.yml", "the rule file")
	prom := flag.String("prometheus", "bin/prometheus", "the Prometheus binary")
	hours := flag.Int("hours", 24, "hours of history")
	evals := flag.Int("evaluations", 5, "evaluations of each group to measure")
	topRules = flag.Int("top", 5, "costliest rules listed")
	interval := flag.Duration("interval", 30*time.Second, "the rules' evaluation interval (kube-prometheus-stack's default is 30s)")
	shards := flag.Int("shards", 1, "label the targets' series with gpureclaim_shard as the rules config's shards: N asks (Prometheus's hashmod relabeling over this many shards); give rules rendered with the same N")
	head := flag.Duration("head", 2*time.Hour, "the newest part of the history, held in Prometheus's head (in memory) as in a running Prometheus; the rest is a persisted block")
	flag.IntVar(&clusters, "clusters", 1, "spread the nodes over this many clusters, each series labelled cluster=cN as a fleet's engine holds them")
	vm := flag.String("victoria-metrics", "", "evaluate on VictoriaMetrics instead: this single-node binary holds the history, and -vmalert evaluates the rules over it")
	flag.StringVar(&vmalertBin, "vmalert", "bin/vmalert", "the vmalert binary, with -victoria-metrics")
	thanos := flag.String("thanos", "", "evaluate on Thanos Ruler instead: this thanos binary runs a sidecar beside -prometheus (which holds the history and evaluates nothing), Query, and the ruler")
	flag.Parse()
	if *thanos != "" {
		if err := runThanos(*gpus, *hours, *evals, *rules, *prom, *thanos, *head, *interval); err != nil {
			fmt.Fprintln(os.Stderr, "rulesbench:", err)
			os.Exit(1)
		}
		return
	}
	if *vm != "" {
		if err := runVictoriaMetrics(*gpus, *hours, *evals, *rules, *vm, *interval); err != nil {
			fmt.Fprintln(os.Stderr, "rulesbench:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*gpus, *hours, *evals, *rules, *prom, *head, *shards, *interval); err != nil {
		fmt.Fprintln(os.Stderr, "rulesbench:", err)
		os.Exit(1)
	}
}

const step = time.Minute

var (
	topRules   *int
	clusters   int
	vmalertBin string
)

// unit is one series set the exporter would serve for a unit.
type unit struct {
	uuid, gpuUUID, node, kind, profile, index string
	slices                                    int
	owners                                    [][2]string // namespace, pod
	class                                     int         // 0 idle, 1 busy, 2 wasted, 3 intermittent
	totalBytes                                float64
}

// fleet lays out n GPUs: 8 a node; every tenth GPU in MIG mode with four
// instances; of the units, a tenth free, a tenth shared by two pods; their
// activity idle, busy, wasted or intermittent in turn.
func fleet(n int) []unit {
	var us []unit
	k := 0
	for g := range n {
		node := fmt.Sprintf("gpu-node-%d", g/8)
		gpu := "GPU-" + hexID("gpu", g)
		idx := fmt.Sprint(g % 8)
		add := func(u unit) {
			k++
			u.class = k % 4
			switch k % 10 {
			case 0: // free
			case 1:
				u.owners = [][2]string{{"serving", fmt.Sprintf("infer-%d-a", k)}, {"serving", fmt.Sprintf("infer-%d-b", k)}}
			default:
				u.owners = [][2]string{{fmt.Sprintf("team-%d", k%50), fmt.Sprintf("pod-%d", k)}}
			}
			us = append(us, u)
		}
		if g%10 == 9 {
			for i, p := range []struct {
				name   string
				slices int
				gb     float64
			}{{"3g.40gb", 3, 40}, {"2g.20gb", 2, 20}, {"1g.10gb", 1, 10}, {"1g.10gb", 1, 10}} {
				add(unit{uuid: "MIG-" + hexID("mig", g, i), gpuUUID: gpu, node: node, kind: "mig", profile: p.name, index: idx, slices: p.slices, totalBytes: p.gb * (1 << 30)})
			}
			continue
		}
		add(unit{uuid: gpu, gpuUUID: gpu, node: node, kind: "gpu", index: idx, totalBytes: 80 << 30})
	}
	return us
}

// hexID is a UUID's hex part, as NVML's look: the rules shard by its first
// two digits.
func hexID(parts ...any) string {
	sum := sha256.Sum256([]byte(fmt.Sprint(parts...)))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

var profiles = []struct {
	name   string
	slices int
	gb     float64
}{{"1g.10gb", 1, 10}, {"1g.20gb", 1, 20}, {"2g.20gb", 2, 20}, {"3g.40gb", 3, 40}, {"4g.40gb", 4, 40}, {"7g.80gb", 7, 80}}

// activity is a unit's activity at minute m.
func (u unit) activity(m int) float64 {
	switch u.class {
	case 1:
		return 0.6 + 0.3*math.Abs(math.Sin(float64(m)/7))
	case 2:
		return 0.1
	case 3:
		if (m/30)%2 == 0 {
			return 0.8
		}
		return 0
	}
	return 0
}

// series is one input series and its value at each minute.
type series struct {
	l labels.Labels
	v func(m int) float64
}

// fleetSeries are the exporter's series for the units, each target's in
// its shard when there are several, as the scrape relabeling puts them.
func fleetSeries(us []unit, shards int) ([]series, error) {
	var rcs []*relabel.Config
	if shards > 1 {
		if err := yaml.Unmarshal([]byte(rules.ShardRelabeling(shards)), &rcs); err != nil {
			return nil, err
		}
	}
	var ss []series
	for _, u := range us {
		base := []string{"job", "gpureclaim-exporter", "instance", u.node + ":9847", "uuid", u.uuid, "gpu_uuid", u.gpuUUID}
		if clusters > 1 {
			n, _ := strconv.Atoi(strings.TrimPrefix(u.node, "gpu-node-"))
			base = append(base, names.LabelCluster, fmt.Sprintf("c%d", n%clusters))
		}
		if shards > 1 {
			lb := labels.NewBuilder(labels.FromStrings("__address__", u.node+":9847"))
			relabel.ProcessBuilder(lb, rcs...)
			base = append(base, names.LabelShard, lb.Get(names.LabelShard))
		}
		with := func(name string, extra ...string) labels.Labels {
			return labels.FromStrings(append(append([]string{"__name__", name}, base...), extra...)...)
		}
		one := func(int) float64 { return 1 }
		ss = append(ss, series{with("gpureclaim_unit_info", "node", u.node, "kind", u.kind, "gpu_index", u.index, "model", "NVIDIA H100 80GB HBM3", "mig_profile", u.profile), one})
		ss = append(ss, series{with("gpureclaim_unit_sm_active_ratio"), u.activity})
		if u.kind == "gpu" {
			ss = append(ss, series{with("gpureclaim_unit_utilization_ratio"), func(m int) float64 { return math.Min(1, u.activity(m)*1.2) }})
		}
		total := u.totalBytes
		used := func(m int) float64 {
			if len(u.owners) == 0 {
				return 0
			}
			if u.class == 2 {
				return 0.7 * total
			}
			if len(u.owners) > 1 {
				return 0.96 * total
			}
			return 0.4 * total
		}
		ss = append(ss, series{with("gpureclaim_unit_memory_used_bytes"), used}, series{with("gpureclaim_unit_memory_total_bytes"), func(int) float64 { return total }})
		for _, o := range u.owners {
			ss = append(ss, series{with("gpureclaim_unit_owner_info", "namespace", o[0], "pod", o[1], "container", "main", "user", "", "slurm_job", "", "keep", "false"), one})
		}
		if u.kind == "mig" {
			s := float64(u.slices)
			ss = append(ss, series{with("gpureclaim_mig_instance_slices"), func(int) float64 { return s }})
			for _, p := range profiles {
				gb, sl := p.gb*(1<<30), float64(p.slices)
				ss = append(ss, series{with("gpureclaim_mig_profile_memory_bytes", "profile", p.name), func(int) float64 { return gb }},
					series{with("gpureclaim_mig_profile_slices", "profile", p.name), func(int) float64 { return sl }})
			}
		}
	}
	return ss, nil
}

// appendMinutes appends minutes [from, to] of every series, from start, an
// hour at a time so that each appender's memory stays small.
func appendMinutes(appender func() storage.Appender, ss []series, start time.Time, from, to int) (int, error) {
	samples := 0
	for m0 := from; m0 <= to; m0 += 60 {
		app := appender()
		for _, s := range ss {
			for m := m0; m < m0+60 && m <= to; m++ {
				if _, err := app.Append(0, s.l, start.Add(time.Duration(m)*step).UnixMilli(), s.v(m)); err != nil {
					return 0, err
				}
				samples++
			}
		}
		if err := app.Commit(); err != nil {
			return 0, err
		}
	}
	return samples, nil
}

// writeHistory writes the history as Prometheus would hold it: minutes
// before the last head hours in a persisted block, the rest in the head
// (its write-ahead log, which Prometheus replays when it starts), where
// the rules read their recent samples in a running Prometheus.
func writeHistory(dir string, ss []series, start, end time.Time, head time.Duration) (int, error) {
	ctx := context.Background()
	minutes := int(end.Sub(start) / step)
	inHead := min(minutes, int(head/step))
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, end.Sub(start).Milliseconds()+1)
	if err != nil {
		return 0, err
	}
	n, err := appendMinutes(func() storage.Appender { return w.Appender(ctx) }, ss, start, 0, minutes-inHead)
	if err == nil {
		_, err = w.Flush(ctx)
	}
	w.Close()
	if err != nil || inHead == 0 {
		return n, err
	}
	db, err := tsdb.Open(dir, slog.New(slog.DiscardHandler), nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return 0, err
	}
	db.DisableCompactions()
	h, err := appendMinutes(func() storage.Appender { return db.Appender(ctx) }, ss, start, minutes-inHead+1, minutes)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return n + h, err
}

func median(xs []float64) float64 {
	d := append([]float64(nil), xs...)
	sort.Float64s(d)
	return d[len(d)/2]
}

type groupsAnswer struct {
	Data struct {
		Groups []group `json:"groups"`
	} `json:"data"`
}

// group is a rule group as a ruler's /api/v1/rules tells it.
type group struct {
	Name           string    `json:"name"`
	EvaluationTime float64   `json:"evaluationTime"`
	LastEvaluation time.Time `json:"lastEvaluation"`
	Rules          []struct {
		Name           string  `json:"name"`
		EvaluationTime float64 `json:"evaluationTime"`
		Health         string  `json:"health"`
		LastError      string  `json:"lastError"`
	} `json:"rules"`
}

func get(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

func run(gpus, hours, evals int, rulesFile, promBin string, head time.Duration, shards int, interval time.Duration) error {
	dir, err := os.MkdirTemp("", "rulesbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	us := fleet(gpus)
	// The history ends a moment ago: the rules' instant selectors find it,
	// and their own samples, appended now, come after the block.
	end := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	start := end.Add(-time.Duration(hours) * time.Hour)
	t0 := time.Now()
	ss, err := fleetSeries(us, shards)
	if err != nil {
		return err
	}
	nseries := len(ss)
	nsamples, err := writeHistory(data, ss, start, end, head)
	// The input series in the head are not the rules': only what they add counts.
	inHead := 0
	if head > 0 {
		inHead = nseries
	}
	if err != nil {
		return fmt.Errorf("writing the history: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%d GPUs, %d units: %d series, %d samples written in %s\n", gpus, len(us), nseries, nsamples, time.Since(t0).Round(time.Second))

	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf("global: {evaluation_interval: %s}\nrule_files: [%q]\n", interval, abs)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	// Healthy, not ready: the rules are read while it replays its head.
	cmd, base, err := serve(dir, "prometheus", promBin, "/-/healthy", func(addr string) []string {
		return []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + data,
			"--storage.tsdb.retention.time=30d", "--web.listen-address=" + addr, "--log.level=warn"}
	})
	if err != nil {
		return err
	}
	defer stop(cmd)
	began, cpu0 := time.Now(), cpuSeconds(cmd)
	w := watchGroups(base, evals, interval, false)
	seen, rulesCost := w.seen, w.rulesCost
	if len(seen) == 0 {
		b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		return fmt.Errorf("no rule group evaluated:\n%s", b)
	}
	var status struct {
		Data struct {
			HeadStats struct {
				NumSeries int `json:"numSeries"`
			} `json:"headStats"`
		} `json:"data"`
	}
	if err := get(base+"/api/v1/status/tsdb", &status); err != nil {
		return err
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Printf("| GPUs | units | input series | rule group | evaluations | median | max | head series the rules add |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, n := range names {
		d := seen[n]
		fmt.Printf("| %d | %d | %d | %s | %d | %.0f ms | %.0f ms | %d |\n", gpus, len(us), nseries, n, len(d), median(d)*1000, slices.Max(d)*1000, status.Data.HeadStats.NumSeries-inHead)
	}
	type rc struct {
		name string
		s    float64
	}
	var top []rc
	for n, s := range rulesCost {
		top = append(top, rc{n, median(s)})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].s > top[j].s })
	took := time.Since(began)
	cpu := cpuSeconds(cmd) - cpu0
	fmt.Printf("\nWhile evaluating (%s): Prometheus spent %.1f CPU-seconds (%.2f cores); peak resident memory %d MiB.\n",
		took.Round(time.Second), cpu, cpu/took.Seconds(), peakRSS(cmd.Process.Pid)>>10)
	fmt.Printf("\nCostliest rules (median of an evaluation):")
	for _, r := range top[:min(*topRules, len(top))] {
		fmt.Printf(" %s %.0f ms;", r.name, r.s*1000)
	}
	fmt.Println()
	w.printAlerts()
	return w.err()
}

// groupTimes are what a ruler reported: each group's evaluation times,
// each rule's, and the rules that failed.
type groupTimes struct {
	seen, rulesCost map[string][]float64
	errs            []string
	// alerts counts the ruler's alerts by name and state once a group has
	// been evaluated twice: later, with no new samples, the inputs go stale.
	alerts map[string]int
}

// watchGroups reads a ruler's /api/v1/rules every second until each group
// has been evaluated evals times, or for twice as long as that takes.
// sumRules: a group's time is the sum of its rules' (vmalert reports no
// group time, and evaluates a group's rules in turn).
func watchGroups(base string, evals int, interval time.Duration, sumRules bool) groupTimes {
	w := groupTimes{seen: map[string][]float64{}, rulesCost: map[string][]float64{}}
	last := map[string]time.Time{}
	deadline := time.Now().Add(time.Duration(evals+3) * interval * 2)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		var g groupsAnswer
		if err := get(base+"/api/v1/rules", &g); err != nil {
			continue
		}
		done := len(g.Data.Groups) > 0
		for _, gr := range g.Data.Groups {
			if !gr.LastEvaluation.IsZero() && gr.LastEvaluation.After(last[gr.Name]) {
				last[gr.Name] = gr.LastEvaluation
				took, sum := gr.EvaluationTime, 0.0
				for _, r := range gr.Rules {
					sum += r.EvaluationTime
					w.rulesCost[r.Name] = append(w.rulesCost[r.Name], r.EvaluationTime)
					if r.Health == "err" {
						w.errs = append(w.errs, r.Name+": "+r.LastError)
					}
				}
				if sumRules {
					took = sum
				}
				w.seen[gr.Name] = append(w.seen[gr.Name], took)
			}
			if len(w.seen[gr.Name]) < evals {
				done = false
			}
		}
		if w.alerts == nil && slices.ContainsFunc(g.Data.Groups, func(gr group) bool { return len(w.seen[gr.Name]) >= 2 }) {
			w.alerts = alertCounts(base)
		}
		if done {
			break
		}
	}
	return w
}

// printGroups prints each group's evaluations as a Markdown table.
func (w groupTimes) printGroups(gpus, inputSeries int) {
	groups := slices.Sorted(maps.Keys(w.seen))
	fmt.Printf("| GPUs | clusters | input series | rule group | evaluations | median | max |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, g := range groups {
		d := w.seen[g]
		fmt.Printf("| %d | %d | %d | %s | %d | %.0f ms | %.0f ms |\n", gpus, clusters, inputSeries, g, len(d), median(d)*1000, slices.Max(d)*1000)
	}
}

// alertCounts are a ruler's alerts by name and state.
func alertCounts(base string) map[string]int {
	var a struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	n := map[string]int{}
	if err := get(base+"/api/v1/alerts", &a); err != nil {
		n["(unread: "+err.Error()+")"] = 0
	}
	for _, al := range a.Data.Alerts {
		n[al.Labels["alertname"]+" "+al.State]++
	}
	return n
}

// printAlerts prints the alerts once a group had been evaluated twice, to
// set one engine's beside another's.
func (w groupTimes) printAlerts() {
	keys := slices.Sorted(maps.Keys(w.alerts))
	fmt.Printf("\nAlerts once a group was evaluated twice:")
	for _, k := range keys {
		fmt.Printf(" %s %d;", k, w.alerts[k])
	}
	fmt.Println()
}

// err names the first rules that failed, if any did.
func (w groupTimes) err() error {
	if len(w.errs) == 0 {
		return nil
	}
	return fmt.Errorf("rules failed: %s", strings.Join(w.errs[:min(5, len(w.errs))], "; "))
}
