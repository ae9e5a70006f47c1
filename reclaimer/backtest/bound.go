package backtest

import (
	"cmp"
	"iter"
	"slices"
	"time"
)

// Bound is the most any policy could free at a cost in cold starts: a
// policy that knows how long every pause will last, acts Delay into the
// ones it picks, and picks those that free the most per cold start
// first. A policy that cannot see the future frees less; if the bound is
// under a target, no policy reaches it.
type Bound struct {
	// Delay is how long a pause lasts before the policy acts: at least the
	// idle alert's wait and the owner's grace.
	Delay time.Duration `json:"delay"`
	// ColdStartsPerWorkloadDay is the budget, as the replay counts it.
	ColdStartsPerWorkloadDay float64 `json:"cold_starts_per_workload_day"`
	// Freed is the share of the reclaimable GPU-minutes freed without regret.
	Freed float64 `json:"freed"`
}

// pause is a run of idle steps a reclaim could take.
type pause struct {
	freed   int  // steps freed by acting Delay into it
	returns bool // work comes back at its end: a restore, a cold start
}

// Bounds computes a Bound per delay and budget over the workloads keep
// accepts, counting as Run does: a step is reclaimable when it is idle
// and work does not come back within the regret window, a reclaim frees
// the held steps until work comes back, and a reclaim whose work comes
// back within the window is a regret (the policy never picks one).
func Bounds(h History, threshold float64, regret time.Duration, delays []time.Duration, budgets []float64, keep func(id string) bool) []Bound {
	all := make([][]pause, len(delays)) // per delay
	reclaimable, days := h.judge(threshold, regret, keep, func(w *Workload, next []int) {
		for di, d := range delays {
			all[di] = append(all[di], pauses(w, h.Step, threshold, regret, d, next)...)
		}
	})
	var out []Bound
	for di, d := range delays {
		ps := slices.SortedFunc(slices.Values(all[di]), func(a, b pause) int { return cmp.Compare(b.freed, a.freed) })
		for _, budget := range budgets {
			left := budget * days
			freed := 0
			for _, p := range ps {
				if p.returns {
					if left < 1 {
						continue
					}
					left--
				}
				freed += p.freed
			}
			b := Bound{Delay: d, ColdStartsPerWorkloadDay: budget}
			if reclaimable > 0 {
				b.Freed = float64(freed) / float64(reclaimable)
			}
			out = append(out, b)
		}
	}
	return out
}

// pauses lists what acting delay into each of a workload's pauses would
// free without regret.
func pauses(w *Workload, step time.Duration, threshold float64, regret, delay time.Duration, next []int) []pause {
	var out []pause
	d := int(delay / step)
	for start, end := range w.pauses(threshold, next) {
		// A regret: the policy knows better.
		if freed, acted, regretted := w.actInto(start+d, end, step, regret); acted && !regretted {
			out = append(out, pause{freed: freed, returns: end >= 0})
		}
	}
	return out
}

// pauses yields the workload's pauses: the step each starts at and the
// step work comes back at (-1: never). A pause runs until work comes
// back: absent steps inside it do not end it.
func (w *Workload) pauses(threshold float64, next []int) iter.Seq2[int, int] {
	return func(yield func(start, end int) bool) {
		for start := 0; start < len(w.Activity); start++ {
			if !w.idleAt(start, threshold) {
				continue
			}
			end := next[start]
			if !yield(start, end) || end < 0 {
				return
			}
			start = end
		}
	}
}

// actInto is what a reclaim at step at frees of a pause that ends at end
// (-1: never): the held steps until work comes back, nothing if the pause
// is over before at (acted false), and nothing if work comes back within
// the regret window (regretted).
func (w *Workload) actInto(at, end int, step, regret time.Duration) (freed int, acted, regretted bool) {
	switch {
	case at >= len(w.Activity) || end >= 0 && at >= end:
		return 0, false, false
	case end >= 0 && time.Duration(end-at)*step <= regret:
		return 0, true, true
	}
	for k := at + 1; k < len(w.Activity) && (end < 0 || k < end); k++ {
		if w.present(k) {
			freed++
		}
	}
	return freed, true, false
}

// judge calls each for every workload keep accepts, with its next busy
// steps, and counts their reclaimable steps (idle, and work does not come
// back within the regret window) and workload-days.
func (h History) judge(threshold float64, regret time.Duration, keep func(id string) bool, each func(w *Workload, next []int)) (reclaimable int, days float64) {
	steps := 0
	for i := range h.Workloads {
		w := &h.Workloads[i]
		if !keep(w.ID) {
			continue
		}
		steps += w.span()
		next := nextBusy(w, threshold)
		for k := range w.Activity {
			if w.idleAt(k, threshold) && (next[k] < 0 || time.Duration(next[k]-k)*h.Step > regret) {
				reclaimable++
			}
		}
		each(w, next)
	}
	return reclaimable, float64(steps) * h.Step.Minutes() / (24 * 60)
}
