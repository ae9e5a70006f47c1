package backtest_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/trace"
	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/rules"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var (
	start   = time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)
	service = reclaim.TopOwner{APIVersion: "apps/v1", Kind: "Deployment", Name: "serve", Replicas: 1, Stop: reclaim.StopScale}
)

// history builds a one-minute history from each workload's activity.
func history(t testing.TB, steps int, workloads map[string]func(minute int) float64) backtest.History {
	t.Helper()
	tr := &trace.Trace{Start: start, Step: time.Minute, Duty: map[string][]float64{}, Memory: map[string][]float64{}}
	for id, f := range workloads {
		duty, mem := make([]float64, steps), make([]float64, steps)
		for i := range steps {
			duty[i], mem[i] = f(i), 20<<30
		}
		tr.Duty[id], tr.Memory[id] = duty, mem
	}
	return backtest.FromTrace(tr, service)
}

// rulesFile renders the rules for a config ("" for the defaults).
func rulesFile(t *testing.T, yaml string) string {
	t.Helper()
	c, err := rules.Parse([]byte(yaml))
	require.NoError(t, err)
	b, err := rules.Render(c)
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "rules.yml")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

// policy loads a reclaimer config ("" for the defaults).
func policy(t *testing.T, yaml string) *config.Config {
	t.Helper()
	if yaml == "" {
		c, err := config.DefaultWithoutSecrets()
		require.NoError(t, err)
		return c
	}
	p := filepath.Join(t.TempDir(), "reclaimer.yml")
	require.NoError(t, os.WriteFile(p, []byte("webhook: {bearer_token_file: unread}\nweb: {auth: {none: true}}\nalertmanager: {url: http://am:9093}\n"+yaml), 0o644))
	c, err := config.LoadWithoutSecrets(p)
	require.NoError(t, err)
	return c
}

func run(t *testing.T, h backtest.History, rulesPath string, cfg *config.Config) *backtest.Result {
	t.Helper()
	res, err := backtest.Run(context.Background(), h, backtest.Options{RuleFiles: []string{rulesPath}, Config: cfg, Dir: t.TempDir()})
	require.NoError(t, err)
	return res
}

func minutes(d time.Duration) int { return int(d / time.Minute) }

func busy(int) float64 { return 0.9 }

// goneAt is busy until minute m, then idle for good.
func goneAt(m int) func(int) float64 {
	return func(i int) float64 {
		if i < m {
			return 0.9
		}
		return 0
	}
}

// pauses is busy for 40 minutes and idle for 20, every hour.
func pauses(i int) float64 {
	if i%60 < 40 {
		return 0.9
	}
	return 0
}

const committedRules = "../../rules/gpureclaim.rules.yml"

// A workload that stops for good is reclaimed once, when the default rules
// and policy say: the first evaluation whose lookback holds only idle
// samples starts the alert (a minute after the last busy sample), the
// reclaimer's copy fires idle.reclaim_after later and the owner is warned;
// the action comes a grace period after that. Nothing comes back.
func TestIdleForGood(t *testing.T) {
	t.Parallel()
	h := history(t, 240, map[string]func(int) float64{"gone": goneAt(60)})
	res := run(t, h, committedRules, policy(t, ""))
	w := res.Workloads[0]

	warn := 60 + 1 + minutes(time.Duration(rules.DefaultConfig().Idle.ReclaimAfter))
	act := warn + minutes(time.Duration(*policy(t, "").Policies[0].Grace))
	require.Equal(t, []int{warn}, w.Warned)
	require.Equal(t, []backtest.Reclaimed{{Action: config.ActionScaleDown, At: act, Returned: -1, Restored: -1, Freed: 239 - act}}, w.Reclaims)
	require.Equal(t, 240, w.Held)
	require.Equal(t, 180, w.Idle)
	require.Equal(t, 239-act, w.Freed)
}

// On a workload that stops for good the defaults free what a policy that
// knows the future frees acting as late (all of the pause after the
// action, no cold start): the report gives that bound beside the figure,
// and the share of it freed, 100%. Acting sooner, the bound is more.
func TestReportBesideItsBound(t *testing.T) {
	t.Parallel()
	h := history(t, 240, map[string]func(int) float64{"gone": goneAt(60)})
	res := run(t, h, committedRules, policy(t, ""))
	act := res.Workloads[0].Reclaims[0].At
	rep := backtest.Summarize(res, 0)
	rep.SetBounds(h, res.IdleThreshold, res.RegretWindow, time.Duration(act-60)*time.Minute, 0)
	require.NotNil(t, rep.Total.Bound)
	require.Zero(t, rep.Total.Bound.ColdStartsPerWorkloadDay)
	require.InDelta(t, 1, rep.Total.ShareOfBound(), 1e-9)
	rep.SetBounds(h, res.IdleThreshold, res.RegretWindow, 25*time.Minute, 0)
	require.Less(t, rep.Total.ShareOfBound(), 1.0)
	var md bytes.Buffer
	require.NoError(t, rep.Markdown(&md, 0))
	require.Contains(t, md.String(), "at 25m (")
}

// Under the rules of rules/classes.yaml a Deployment's pod is in the
// serving class (its controller, a ReplicaSet, as kube-state-metrics would
// say): it is warned after serving's reclaim_after, not idle's.
func TestIdleClasses(t *testing.T) {
	t.Parallel()
	h := history(t, 300, map[string]func(int) float64{"gone": goneAt(60)})
	c, err := rules.Load("../../rules/classes.yaml")
	require.NoError(t, err)
	var serving time.Duration
	for _, k := range c.Idle.Classes {
		if k.Name == "serving" {
			serving = time.Duration(k.ReclaimAfter)
		}
	}
	require.NotEqual(t, time.Duration(c.Idle.ReclaimAfter), serving)
	res := run(t, h, "../../rules/gpureclaim-classes.rules.yml", policy(t, ""))
	require.Equal(t, []int{60 + 1 + minutes(serving)}, res.Workloads[0].Warned)
}

func TestBusyIsLeftAlone(t *testing.T) {
	t.Parallel()
	h := history(t, 240, map[string]func(int) float64{"busy": busy})
	res := run(t, h, committedRules, policy(t, ""))
	require.Empty(t, res.Workloads[0].Warned)
	require.Empty(t, res.Workloads[0].Reclaims)
	require.Zero(t, res.Workloads[0].Idle)
}

// A workload that pauses for 20 minutes every hour, over six hours.
func TestPausesTwentyMinutesEveryHour(t *testing.T) {
	t.Parallel()
	h := history(t, 361, map[string]func(int) float64{"pauses": pauses})

	t.Run("the old defaults reclaim every pause, and regret it", func(t *testing.T) {
		// idle.for 10m for both copies of GPUIdle, a grace of 5m: the alert
		// fires 11 minutes into the pause, the action comes 5 minutes later
		// and the work is back 4 minutes after that.
		res := run(t, h, rulesFile(t, "idle: {reclaim_after: 10m}"), policy(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m, min_runtime: 30m}]"))
		w := res.Workloads[0]
		require.Len(t, w.Reclaims, 6)
		for i, r := range w.Reclaims {
			require.Equal(t, backtest.Reclaimed{Action: config.ActionScaleDown, At: 60*i + 56, Returned: 60*i + 60, Restored: -1, Freed: 3, Regret: true}, r, "pause %d", i)
		}
	})

	t.Run("the defaults wait longer than the pauses", func(t *testing.T) {
		res := run(t, h, committedRules, policy(t, ""))
		require.Empty(t, res.Workloads[0].Reclaims)
		require.Empty(t, res.Workloads[0].Warned)
	})

	t.Run("the pause history learns from one regret", func(t *testing.T) {
		// Acting after 5 idle minutes regrets the first pause; the pause's
		// length is remembered when the work comes back, and every later
		// pause is waited out.
		res := run(t, h, rulesFile(t, "idle: {reclaim_after: 5m, pauses: {window: 1d}}"), policy(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 0s, min_runtime: 0s}]"))
		w := res.Workloads[0]
		require.Equal(t, []backtest.Reclaimed{{Action: config.ActionScaleDown, At: 46, Returned: 60, Restored: -1, Freed: 13, Regret: true}}, w.Reclaims)
	})
}

// A Deployment of several replicas is left to its autoscaler: its owner is
// told, nothing is scaled; a Job is suspended, freeing its GPU until work
// comes back; a bare pod is evicted.
func TestControllersDecideTheAction(t *testing.T) {
	t.Parallel()
	h := history(t, 240, map[string]func(int) float64{"gone": goneAt(30)})
	h.Workloads[0].TopOwner = reclaim.TopOwner{APIVersion: "apps/v1", Kind: "Deployment", Name: "serve", Replicas: 3, Stop: reclaim.StopScale}
	res := run(t, h, committedRules, policy(t, ""))
	require.Empty(t, res.Workloads[0].Reclaims)
	require.Equal(t, 1, res.States[string(reclaim.Notified)])

	h.Workloads[0].TopOwner = reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Name: "train", Stop: reclaim.StopPatch, Stopped: "suspended"}
	res = run(t, h, committedRules, policy(t, ""))
	require.Len(t, res.Workloads[0].Reclaims, 1)
	require.Equal(t, config.ActionStop, res.Workloads[0].Reclaims[0].Action)
	require.Positive(t, res.Workloads[0].Reclaims[0].Freed, "the suspended Job's GPU is free")

	h.Workloads[0].TopOwner = reclaim.TopOwner{Kind: "TrainingRun", Name: "run", Stop: reclaim.StopNone, Why: "cannot stop it"}
	res = run(t, h, committedRules, policy(t, ""))
	require.Empty(t, res.Workloads[0].Reclaims, "an owner it cannot stop is only told")

	h.Workloads[0].TopOwner = reclaim.TopOwner{}
	res = run(t, h, committedRules, policy(t, ""))
	require.Len(t, res.Workloads[0].Reclaims, 1)
	require.Equal(t, config.ActionEvict, res.Workloads[0].Reclaims[0].Action)
}

// The report and the plot of a small fleet, as golden files.
func TestReportAndPlot(t *testing.T) {
	t.Parallel()
	h := history(t, 300, map[string]func(int) float64{
		"a-gone":   goneAt(60),
		"b-pauses": pauses,
		"c-busy":   busy,
		"d-back": func(i int) float64 { // away for two hours, then back
			if i >= 40 && i < 160 {
				return 0
			}
			return 0.5 + 0.4*math.Sin(float64(i)/7)
		},
	})
	res := run(t, h, committedRules, policy(t, ""))
	rep := backtest.Summarize(res, 0)
	var text, md, svg bytes.Buffer
	require.NoError(t, rep.Text(&text, 0))
	require.NoError(t, rep.Markdown(&md, 0))
	require.NoError(t, backtest.Plot(&svg, h, res, "d-back"))
	golden(t, "report.txt", text.Bytes())
	golden(t, "report.md", md.Bytes())
	golden(t, "plot.svg", svg.Bytes())

	require.Equal(t, 4, rep.Total.Workloads)
	require.Equal(t, 2, rep.Total.Reclaims, "the gone one, and the one that came back")
	require.Equal(t, 0, rep.Total.Regrets, "back after more than the regret window")
	require.Error(t, backtest.Plot(&svg, h, res, "nobody"))
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(p, got, 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run go test -update to write %s", p)
	require.Equal(t, string(want), string(got), "%s differs; go test -update rewrites it", p)
}

// BenchmarkRun replays 20 workloads for four hours through the committed
// rules and the default policy; ns/op over 240 steps is the cost of a
// step of a 20-workload fleet.
func BenchmarkRun(b *testing.B) {
	ws := map[string]func(int) float64{}
	for i := range 20 {
		switch i % 3 {
		case 0:
			ws[fmt.Sprintf("gone-%d", i)] = goneAt(30 + i)
		case 1:
			ws[fmt.Sprintf("pauses-%d", i)] = pauses
		default:
			ws[fmt.Sprintf("busy-%d", i)] = busy
		}
	}
	h := history(b, 240, ws)
	cfg, err := config.DefaultWithoutSecrets()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := backtest.Run(context.Background(), h, backtest.Options{RuleFiles: []string{committedRules}, Config: cfg, Dir: b.TempDir()}); err != nil {
			b.Fatal(err)
		}
	}
}
