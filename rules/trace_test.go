package rules

import (
	"math"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/trace"
	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The first four hours of twelve pods of the shared trace (inference pods
// serving diffusion models, Alibaba cluster-trace-v2026-GenAI), replayed as
// the exporter's series through the committed rules by Prometheus's own
// rule manager. The trace is NVML duty cycle, so the rules take the
// utilization fallback.
func TestTraceExcerptIdleAlerts(t *testing.T) {
	tr, err := trace.Load("../traces/genai-pods.csv.gz")
	require.NoError(t, err)
	all := backtest.FromTrace(tr, reclaim.TopOwner{})
	var ids []string
	for _, w := range all.Workloads[:12] {
		ids = append(ids, w.ID)
	}
	h := all.Slice(0, int(4*time.Hour/tr.Step), ids...)
	timelines, err := backtest.ReplayRules(h, t.TempDir(), names.AudiencePeople, "gpureclaim.rules.yml")
	require.NoError(t, err)

	// Steps of the trace (57 s) that the rules evaluate: a firing needs the
	// samples of idle.for plus the lookback (11 minutes) idle, and a run
	// of idle samples that spans 12 minutes always fires.
	back := int(11 * time.Minute / tr.Step)
	fires := int(math.Ceil(float64(12*time.Minute)/float64(tr.Step))) + 1
	firing := map[string][2]int{} // steps firing, stretches
	for _, st := range backtest.FiringStretches(h, timelines, names.AlertIdle, 0.05) {
		f := firing[st.Workload]
		firing[st.Workload] = [2]int{f[0] + st.Len(), f[1] + 1}
	}
	for _, w := range h.Workloads {
		states := timelines[w.ID][names.AlertIdle]
		for step, st := range states {
			if st != backtest.Firing {
				continue
			}
			// Firing means every sample of the last idle.for + lookback was idle.
			for k := max(0, step-back); k <= step; k++ {
				if a := w.Activity[k]; !math.IsNaN(a) {
					require.Less(t, a, 0.05, "%s fired at step %d but was busy at %d", w.ID, step, k)
				}
			}
		}
		// And a long enough run of idle samples always fires.
		run := 0
		for step, a := range w.Activity {
			if math.IsNaN(a) || a >= 0.05 {
				run = 0
				continue
			}
			run++
			if run >= fires {
				require.Equal(t, backtest.Firing, states[step], "%s idle for %d samples at step %d", w.ID, run, step)
			}
		}
	}
	// Steps firing and firing stretches per pod. Every pod pauses for more
	// than idle.for at some point in four hours; most resume within minutes,
	// the pauses between bursts that a reclaim policy must tell from an
	// abandoned GPU (see the backtest).
	require.Equal(t, map[string][2]int{
		"00800b6d2cabe5b9ce855ec9eab6e9ff": {37, 1},
		"03dc060838ef05053bdea6d483cde7e5": {2, 2},
		"07ff74bdf1b06c02945c40819ec1d38e": {2, 2},
		"081177dd05d758b23a62391e75a1bb34": {13, 2},
		"0e1fe71a611f28739fe7fc6915583da0": {25, 1},
		"0e7c45fddf2f1dda1b518dbb5d3066a0": {11, 3},
		"0ec705c2842d35b28efbea446e2c9255": {13, 3},
		"11415d99a127e215d2148a1f6600007f": {9, 1},
		"1b93d19ce2184dfb0dec13f67a2f1693": {37, 1},
		"23b8eba99c14e73d454503a55ae96989": {4, 1},
		"25da09a77268ccc99a7968b3e453b8f0": {37, 2},
		"25e8f3734b4bedd8778eb6fe4c6e47b6": {49, 1},
	}, firing)
}
