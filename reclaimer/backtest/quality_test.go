package backtest_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/rules"
)

// diurnal serves traffic from 08:00 to 20:00 (the history starts at
// 08:00), in bursts of seven minutes out of ten, and none at night.
func diurnal(i int) float64 {
	if i%1440 < 720 && i%10 < 7 {
		return 0.9
	}
	return 0
}

// Three workloads whose right answer is known, over two days, under the
// default rules and policy, with restore_when answering from the
// history's demand:
//   - one that pauses 20 minutes every hour is never reclaimed: every
//     pause ends with work;
//   - one that serves by day is scaled down each night an hour after its
//     traffic stops (idle.reclaim_after and the grace), never regretted,
//     and restored on demand the moment its morning traffic comes;
//   - one abandoned after two hours is reclaimed once and never restored.
func TestKnownAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("replays two days through the rules (a third of the quick loop)")
	}
	t.Parallel()
	const days = 2
	h := history(t, days*1440, map[string]func(int) float64{
		"pauses":    pauses,
		"diurnal":   diurnal,
		"abandoned": goneAt(120),
	})
	res, err := backtest.Run(context.Background(), h, backtest.Options{RuleFiles: []string{committedRules}, Config: policy(t, ""), Dir: t.TempDir(), RestoreOnDemand: true})
	require.NoError(t, err)
	wait := 1 + minutes(time.Duration(rules.DefaultConfig().Idle.ReclaimAfter)) + minutes(time.Duration(*policy(t, "").Policies[0].Grace))
	by := map[string]backtest.WorkloadResult{}
	for _, w := range res.Workloads {
		by[w.ID] = w
	}

	require.Empty(t, by["pauses"].Reclaims)
	require.Empty(t, by["pauses"].Warned)

	// The last busy minute of the day is 716 (bursts of 7 in 10); the
	// first evaluation whose lookback is all idle comes two minutes later.
	lastBusy := 716 + 1
	var want []backtest.Reclaimed
	for d := range days {
		at := d*1440 + lastBusy + wait
		r := backtest.Reclaimed{Action: config.ActionScaleDown, At: at, Returned: -1, Restored: -1}
		if d+1 < days {
			r.Returned, r.Restored = (d+1)*1440, (d+1)*1440
		}
		r.Freed = days*1440 - 1 - at
		if r.Returned >= 0 {
			r.Freed = r.Returned - at - 1
		}
		want = append(want, r)
	}
	require.Equal(t, want, by["diurnal"].Reclaims)

	rep := backtest.Summarize(res, 0)
	require.Equal(t, days-1, rep.Total.ColdStarts, "the diurnal service starts cold each morning but the first; the abandoned one never comes back")
	require.InDelta(t, float64(days-1)*3, rep.Total.OwnerWaitMinutes, 1e-9)

	gone := 119 + 1 + wait
	require.Equal(t, []backtest.Reclaimed{{Action: config.ActionScaleDown, At: gone, Returned: -1, Restored: -1, Freed: days*1440 - 1 - gone}}, by["abandoned"].Reclaims)
}

// A regret costs a restore, not an outage: a wait shorter than the pauses
// reclaims every one and regrets it, and restore_when brings the workload
// back the step its work returns.
func TestRegretsRestoredOnDemand(t *testing.T) {
	t.Parallel()
	h := history(t, 361, map[string]func(int) float64{"pauses": pauses})
	res, err := backtest.Run(context.Background(), h, backtest.Options{
		RuleFiles: []string{rulesFile(t, "idle: {reclaim_after: 10m}")}, Dir: t.TempDir(), RestoreOnDemand: true,
		Config: policy(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m, min_runtime: 30m}]"),
	})
	require.NoError(t, err)
	rep := backtest.Summarize(res, 0)
	require.Equal(t, 6, rep.Total.Regrets)
	require.Equal(t, 6, rep.Total.RegretsRestored)
	require.Zero(t, rep.Total.RestoreWaitMinutes)
	for _, r := range res.Workloads[0].Reclaims {
		require.Equal(t, r.Returned, r.Restored)
	}
	// Each restore is a cold start its returning work waits for: a
	// Deployment's, 3 minutes, here over a quarter of a day.
	require.Equal(t, 6, rep.Total.ColdStarts)
	require.InDelta(t, 6*3.0, rep.Total.OwnerWaitMinutes, 1e-9)
	require.InDelta(t, 361.0/1440, rep.Total.WorkloadDays, 1e-9)
	require.InDelta(t, 6/(361.0/1440), rep.Total.ColdStartsPerWorkloadDay(), 1e-9)
	res, err = backtest.Run(context.Background(), h, backtest.Options{
		RuleFiles: []string{rulesFile(t, "idle: {reclaim_after: 10m}")}, Dir: t.TempDir(), RestoreOnDemand: true,
		Config:     policy(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m, min_runtime: 30m}]"),
		ColdStarts: map[string]time.Duration{"Deployment": 10 * time.Minute},
	})
	require.NoError(t, err)
	require.InDelta(t, 6*10.0, backtest.Summarize(res, 0).Total.OwnerWaitMinutes, 1e-9, "a slower cold start, waited for each time")

	// Without restore_when, nobody restores: each regret waits for a person.
	res = run(t, h, rulesFile(t, "idle: {reclaim_after: 10m}"), policy(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m, min_runtime: 30m}]"))
	rep = backtest.Summarize(res, 0)
	require.Equal(t, 6, rep.Total.Regrets)
	require.Zero(t, rep.Total.RegretsRestored)
	require.Zero(t, rep.Total.ColdStarts, "nothing restored, no cold start: the work waits for a person")
}

// The split depends on the workload's ID alone, holds apart about the
// share asked for, and the two sets add up to the whole.
func TestHeldApartSplit(t *testing.T) {
	t.Parallel()
	held := 0
	for i := range 1000 {
		id := fmt.Sprintf("pod-%d", i)
		require.Equal(t, backtest.IsHeldApart(id, 0.5), backtest.IsHeldApart(id, 0.5))
		if backtest.IsHeldApart(id, 0.5) {
			held++
		}
		require.False(t, backtest.IsHeldApart(id, 0))
		if backtest.IsHeldApart(id, 0.3) {
			require.True(t, backtest.IsHeldApart(id, 0.5), "a larger share holds apart a superset")
		}
	}
	require.InDelta(t, 500, held, 60)

	h := history(t, 240, map[string]func(int) float64{"a": goneAt(60), "b": goneAt(90), "c": busy, "d": pauses, "e": goneAt(30), "f": goneAt(150)})
	rep := backtest.Summarize(run(t, h, committedRules, policy(t, "")), 0.5)
	require.NotNil(t, rep.HeldApart)
	require.Equal(t, rep.Total.Workloads, rep.Tuned.Workloads+rep.HeldApart.Workloads)
	require.Equal(t, rep.Total.Reclaims, rep.Tuned.Reclaims+rep.HeldApart.Reclaims)
	require.InDelta(t, rep.Total.IdleMinutes, rep.Tuned.IdleMinutes+rep.HeldApart.IdleMinutes, 1e-9)
	var md bytes.Buffer
	require.NoError(t, rep.Markdown(&md, 0))
	require.Contains(t, md.String(), "| tuned |")
	require.Contains(t, md.String(), "| held apart |")
}

// The frontier is read off the fixed waits: the best freed share at or
// under a regret share, or a number of cold starts per workload-day, and
// the plot places every point.
func TestFrontier(t *testing.T) {
	t.Parallel()
	curve := []backtest.FrontierPoint{
		{Label: "30m", Regret: 0.6, ColdStarts: 3.2, Freed: 0.8, Curve: true},
		{Label: "60m", Regret: 0.3, ColdStarts: 1.1, Freed: 0.5, Curve: true},
		{Label: "90m", Regret: 0.15, ColdStarts: 0.6, Freed: 0.35, Curve: true},
		{Label: "120m", Regret: 0.1, ColdStarts: 0.3, Freed: 0.2, Curve: true},
	}
	require.Equal(t, 0.35, backtest.FrontierAt(curve, backtest.ByRegret, 0.2))
	require.Equal(t, 0.8, backtest.FrontierAt(curve, backtest.ByRegret, 1))
	require.Zero(t, backtest.FrontierAt(curve, backtest.ByRegret, 0.05))
	require.Equal(t, 0.35, backtest.FrontierAt(curve, backtest.ByColdStarts, 1))
	require.Equal(t, 0.5, backtest.FrontierAt(curve, backtest.ByColdStarts, 2))

	p := backtest.PointOf("policy", backtest.Figures{Reclaims: 10, Regrets: 2, RegretFreeMinutes: 300, ReclaimableMinutes: 600, ColdStarts: 3, WorkloadDays: 2})
	require.Equal(t, backtest.FrontierPoint{Label: "policy", Regret: 0.2, ColdStarts: 1.5, Freed: 0.5}, p)
	var svg bytes.Buffer
	require.NoError(t, backtest.Frontier(&svg, "test", backtest.ByRegret, append(curve, p)))
	golden(t, "frontier.svg", svg.Bytes())
	svg.Reset()
	require.NoError(t, backtest.Frontier(&svg, "test", backtest.ByColdStarts, append(curve, p)))
	golden(t, "frontier-cold-starts.svg", svg.Bytes())
}
