package backtest

import (
	"time"
)

// Quiet is the policy a Ceiling replays, as the rules' quiet runs it: the
// idle alert fires After into a pause on a unit that was busy for under a
// share of UnitWindow, else ReclaimAfter into it, and the reclaim acts
// Grace after the alert. A step is busy when a sample over the Lookback
// before it reaches the threshold, as the rules' record of it says.
type Quiet struct {
	After, ReclaimAfter, Grace, UnitWindow, Lookback time.Duration
}

// Ceiling is the most Quiet frees at a budget of cold starts when its
// share (the rules' unit_busy_below) is chosen on the very workloads it is
// judged on. No share chosen beforehand does better there: if a target is
// above the ceiling, no setting of the unit's share reaches it.
type Ceiling struct {
	UnitWindow time.Duration `json:"unit_window"`
	// ColdStartsPerWorkloadDay is the budget, as Bound's.
	ColdStartsPerWorkloadDay float64 `json:"cold_starts_per_workload_day"`
	// UnitBusyBelow is the share that frees the most within the budget;
	// Spent is the cold starts per workload-day it costs.
	UnitBusyBelow float64 `json:"unit_busy_below"`
	Spent         float64 `json:"spent"`
	// Freed is the share of the reclaimable GPU-minutes freed without regret.
	Freed float64 `json:"freed"`
}

// ceilingShares is how finely Ceilings tries the unit's share.
const ceilingShares = 200

// Ceilings computes a Ceiling per budget for q over the workloads keep
// accepts, counting as Bounds does. The unit's busy share at a step is
// that of its held steps in the UnitWindow up to it, and only if it was
// held at the window's start (the rules ask that the owner held the unit
// for the whole window). The alert fires at the first step After into a
// pause where the share is under the setting, if that comes before
// ReclaimAfter. The namespace's quiet is left out: it can only hold a
// unit's alert back.
func Ceilings(h History, threshold float64, regret time.Duration, q Quiet, budgets []float64, keep func(id string) bool) []Ceiling {
	after, late := int(q.After/h.Step), int(q.ReclaimAfter/h.Step)
	grace, window := int(q.Grace/h.Step), max(1, int(q.UnitWindow/h.Step))
	lookback := max(1, int((q.Lookback+h.Step-1)/h.Step)) // samples a range of Lookback holds
	// Per share tried (s/ceilingShares): steps freed and cold starts.
	freed, coldStarts := make([]int, ceilingShares+1), make([]int, ceilingShares+1)
	reclaimable, days := h.judge(threshold, regret, keep, func(w *Workload, next []int) {
		// Busy and held steps up to each step.
		busy, held := make([]int, len(w.Activity)+1), make([]int, len(w.Activity)+1)
		last := -lookback // the last sample at or over the threshold
		for i, a := range w.Activity {
			if a >= threshold {
				last = i
			}
			busy[i+1], held[i+1] = busy[i], held[i]
			if w.present(i) {
				held[i+1]++
				if i-last < lookback {
					busy[i+1]++
				}
			}
		}
		share := func(k int) float64 {
			if k < window || !w.present(k-window) {
				return 1
			}
			return float64(busy[k+1]-busy[k-window+1]) / float64(held[k+1]-held[k-window+1])
		}
		for start, end := range w.pauses(threshold, next) {
			limit := len(w.Activity)
			if end >= 0 {
				limit = end
			}
			// fire is where the alert fires, a quiet one or not: a step
			// passed over for a setting is passed over for the lower ones.
			fire := start + after
			for s := ceilingShares; s >= 0; s-- {
				for fire < start+late && fire < limit && share(fire) >= float64(s)/ceilingShares {
					fire++
				}
				at := min(fire, start+late)
				f, acted, regretted := w.actInto(at+grace, end, h.Step, regret)
				if !regretted {
					freed[s] += f
				}
				if acted && end >= 0 {
					coldStarts[s]++
				}
			}
		}
	})
	var out []Ceiling
	for _, budget := range budgets {
		c := Ceiling{UnitWindow: q.UnitWindow, ColdStartsPerWorkloadDay: budget}
		best := -1
		for s := range freed {
			if spent := float64(coldStarts[s]) / days; spent <= budget && freed[s] > best {
				best, c.UnitBusyBelow, c.Spent = freed[s], float64(s)/ceilingShares, spent
				if reclaimable > 0 {
					c.Freed = float64(freed[s]) / float64(reclaimable)
				}
			}
		}
		out = append(out, c)
	}
	return out
}
