package backtest

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two workloads, a minute a step: a pause of 100 minutes that ends with
// work, and one of 20 (too short to free anything without regret) before
// one of 200 that never ends.
func TestBounds(t *testing.T) {
	t.Parallel()
	a, am := alternate(true, 10, 100, 10)
	b, bm := alternate(true, 10, 20, 10, 200)
	h := History{Start: time.Unix(0, 0), Step: time.Minute, Workloads: []Workload{
		{ID: "a", Activity: a, Memory: am},
		{ID: "b", Activity: b, Memory: bm},
		{ID: "apart", Activity: []float64{0, 0, 0, math.NaN()}, Memory: []float64{1, 1, 1, math.NaN()}},
	}}
	keep := func(id string) bool { return id != "apart" }
	// Reclaimable: a's first 70 idle minutes (work comes back more than 30
	// minutes later), none of b's short pause, all 200 of its last.
	const reclaimable = 270.0
	// 360 minutes in all: a quarter of a workload-day.
	got := Bounds(h, 0.05, 30*time.Minute, []time.Duration{0, 30 * time.Minute}, []float64{1, 4}, keep)
	require.Equal(t, []Bound{
		// At once: b's last pause frees 199 minutes for nothing; a's pause,
		// 99 more, costs a cold start, which a budget of one a day
		// (a quarter here) cannot pay. b's short pause would be a regret.
		{Delay: 0, ColdStartsPerWorkloadDay: 1, Freed: 199 / reclaimable},
		{Delay: 0, ColdStartsPerWorkloadDay: 4, Freed: (199 + 99) / reclaimable},
		// Half an hour in: 169 and 69.
		{Delay: 30 * time.Minute, ColdStartsPerWorkloadDay: 1, Freed: 169 / reclaimable},
		{Delay: 30 * time.Minute, ColdStartsPerWorkloadDay: 4, Freed: (169 + 69) / reclaimable},
	}, got)
}

// Two workloads, a minute a step, whose pauses quiet would take at
// different shares: a pause of a that ends with work after 59 minutes,
// busy for 9 of the 20 minutes before quiet may fire, and one of b that
// never ends, busy for 2 of them.
func TestCeilings(t *testing.T) {
	t.Parallel()
	a, am := alternate(false, 10, 10, 59, 10)
	b, bm := alternate(false, 20, 2, 108)
	h := History{Start: time.Unix(0, 0), Step: time.Minute, Workloads: []Workload{
		{ID: "a", Activity: a, Memory: am},
		{ID: "b", Activity: b, Memory: bm},
	}}
	q := Quiet{After: 10 * time.Minute, ReclaimAfter: time.Hour, Grace: 15 * time.Minute, UnitWindow: 20 * time.Minute, Lookback: time.Minute}
	// Reclaimable: 29 of a's long pause (work comes back more than 30
	// minutes later), all 108 of b's.
	const reclaimable = 137.0
	got := Ceilings(h, 0.05, 30*time.Minute, q, []float64{1, 10}, func(string) bool { return true })
	require.Equal(t, []Ceiling{
		// Any share over 0 takes a's pause for a cold start, which a day's
		// one (a sixth here) cannot pay: only a's own wait, which its pause
		// does not outlast, and b's, 60+15 minutes in, freeing 32.
		{UnitWindow: q.UnitWindow, ColdStartsPerWorkloadDay: 1, Freed: 32 / reclaimable},
		// Over 0.45 both fire 10 minutes in: a's frees 33, b's 82. Lower,
		// a fires later (0.3 and under: a regret).
		{UnitWindow: q.UnitWindow, ColdStartsPerWorkloadDay: 10, UnitBusyBelow: 0.455, Spent: 1 / (float64(89+130) / (24 * 60)), Freed: (33 + 82) / reclaimable},
	}, got)
}

// alternate is a workload's samples, a minute a step: runs of busy (90%)
// and idle minutes by turns, the first busy or not.
func alternate(busy bool, runs ...int) (activity, memory []float64) {
	for _, n := range runs {
		for range n {
			a := 0.0
			if busy {
				a = 0.9
			}
			activity, memory = append(activity, a), append(memory, 1)
		}
		busy = !busy
	}
	return activity, memory
}
