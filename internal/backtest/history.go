// Package backtest replays recorded GPU activity through gpureclaim's own
// rules (with Prometheus's rule manager and PromQL engine) and its own
// reclaim policy, on a simulated clock, to ask what a rule set and a policy
// would have done to a fleet before they touch a GPU.
package backtest

import (
	"math"
	"sort"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/nvmlsim"
)

// History is recorded activity: per workload, one sample per step.
type History struct {
	Start time.Time
	Step  time.Duration
	// Signal names the activity the samples are: "utilization" (NVML's duty
	// cycle, as in the shared trace) or "sm_active" (GPM SM activity).
	Signal    string
	Workloads []Workload
}

// Workload is one holder of one GPU.
type Workload struct {
	ID string
	// Activity (0-1) and Memory (bytes) per step; NaN where not sampled.
	Activity, Memory []float64
}

// Steps is the number of steps the history spans.
func (h *History) Steps() int {
	n := 0
	for _, w := range h.Workloads {
		n = max(n, len(w.Activity))
	}
	return n
}

// At is the time of step i.
func (h *History) At(i int) time.Time { return h.Start.Add(time.Duration(i) * h.Step) }

// FromTrace turns a loaded trace (duty cycle and memory per pod and minute)
// into a history of utilization.
func FromTrace(tr *nvmlsim.Trace) History {
	h := History{Start: tr.Start, Step: tr.Step, Signal: "utilization"}
	for _, id := range tr.Workloads() {
		h.Workloads = append(h.Workloads, Workload{ID: id, Activity: tr.Duty[id], Memory: tr.Memory[id]})
	}
	return h
}

// Slice returns the steps [from, to) of the workloads with the given ids
// (all when ids is empty).
func (h History) Slice(from, to int, ids ...string) History {
	keep := map[string]bool{}
	for _, id := range ids {
		keep[id] = true
	}
	out := History{Start: h.At(from), Step: h.Step, Signal: h.Signal}
	for _, w := range h.Workloads {
		if len(ids) > 0 && !keep[w.ID] {
			continue
		}
		end := min(to, len(w.Activity))
		if from >= end {
			continue
		}
		out.Workloads = append(out.Workloads, Workload{ID: w.ID, Activity: w.Activity[from:end], Memory: w.Memory[from:end]})
	}
	sort.Slice(out.Workloads, func(i, j int) bool { return out.Workloads[i].ID < out.Workloads[j].ID })
	return out
}

// present says whether the workload was sampled at step i.
func (w *Workload) present(i int) bool {
	return i < len(w.Activity) && (!math.IsNaN(w.Activity[i]) || !math.IsNaN(w.Memory[i]))
}

// activityAt is the activity at step i, the last known one across a gap.
func (w *Workload) activityAt(i int) (float64, bool) {
	for j := min(i, len(w.Activity)-1); j >= 0; j-- {
		if !math.IsNaN(w.Activity[j]) {
			return w.Activity[j], true
		}
	}
	return 0, false
}
