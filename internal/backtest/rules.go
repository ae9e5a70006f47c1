package backtest

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/ruleeval"
)

// unitMemory is the memory of the GPU each workload is replayed on.
const unitMemory = 80 << 30

// AlertState is an alert's state for one workload at one step.
type AlertState uint8

const (
	Inactive AlertState = iota
	Pending
	Firing
)

// Timeline is one workload's alert states, one per step, by alert name.
type Timeline map[string][]AlertState

// ReplayRules feeds the history to the rule files as the exporter's series
// (each workload a pod holding one GPU), evaluates them every step with
// Prometheus's rule manager, and returns each workload's alert timeline.
// dir must be an empty folder for the TSDB.
func ReplayRules(h History, dir string, ruleFiles ...string) (map[string]Timeline, error) {
	ev, err := ruleeval.New(dir, h.Step, ruleFiles...)
	if err != nil {
		return nil, err
	}
	defer ev.Close()

	type seriesSet struct{ info, owner, activity, memUsed, memTotal labels.Labels }
	series := make([]seriesSet, len(h.Workloads))
	activityMetric := "gpureclaim_unit_utilization_ratio"
	if h.Signal == "sm_active" {
		activityMetric = "gpureclaim_unit_sm_active_ratio"
	}
	for i, w := range h.Workloads {
		uuid := "GPU-" + w.ID
		unit := []string{"uuid", uuid, "gpu_uuid", uuid, "instance", "replay", "job", "gpureclaim-exporter"}
		series[i] = seriesSet{
			info:     labels.FromStrings(append([]string{"__name__", "gpureclaim_unit_info", "node", "replay", "kind", "gpu", "model", "replay"}, unit...)...),
			owner:    labels.FromStrings(append([]string{"__name__", "gpureclaim_unit_owner_info", "namespace", "replay", "pod", w.ID, "container", "main", "keep", "false"}, unit...)...),
			activity: labels.FromStrings(append([]string{"__name__", activityMetric}, unit...)...),
			memUsed:  labels.FromStrings(append([]string{"__name__", "gpureclaim_unit_memory_used_bytes"}, unit...)...),
			memTotal: labels.FromStrings(append([]string{"__name__", "gpureclaim_unit_memory_total_bytes"}, unit...)...),
		}
	}
	out := map[string]Timeline{}
	for _, w := range h.Workloads {
		out[w.ID] = Timeline{}
	}
	steps := h.Steps()
	for step := 0; step < steps; step++ {
		ts := h.At(step)
		ms := ts.UnixMilli()
		app := ev.Appender()
		for i := range h.Workloads {
			w := &h.Workloads[i]
			if !w.present(step) {
				continue
			}
			s := series[i]
			for _, p := range []struct {
				l labels.Labels
				v float64
			}{{s.info, 1}, {s.owner, 1}, {s.memTotal, unitMemory}, {s.activity, w.Activity[step]}, {s.memUsed, w.Memory[step]}} {
				if math.IsNaN(p.v) {
					continue // not sampled: a gap, as a missed scrape
				}
				if _, err := app.Append(0, p.l, ms, p.v); err != nil {
					app.Rollback()
					return nil, fmt.Errorf("appending %s at %s: %w", p.l, ts, err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			return nil, err
		}
		if err := ev.Eval(ts); err != nil {
			return nil, err
		}
		for _, a := range ev.Alerts() {
			pod := a.Labels.Get("pod")
			tl, ok := out[pod]
			if !ok {
				continue
			}
			if tl[a.Name] == nil {
				tl[a.Name] = make([]AlertState, steps)
			}
			st := Pending
			if a.Firing {
				st = Firing
			}
			tl[a.Name][step] = st
		}
	}
	return out, nil
}

// Stretch is a run of steps in one state.
type Stretch struct {
	Workload   string
	From, To   int // steps [From, To)
	ReturnedAt int // first step after To with activity above the threshold; -1 if none
}

// Minutes is the stretch's length.
func (s Stretch) Len() int { return s.To - s.From }

// FiringStretches lists, per workload, the stretches in which the alert
// fired, and when work came back after each.
func FiringStretches(h History, timelines map[string]Timeline, alert string, busyAbove float64) []Stretch {
	var out []Stretch
	for _, w := range h.Workloads {
		states := timelines[w.ID][alert]
		for i := 0; i < len(states); {
			if states[i] != Firing {
				i++
				continue
			}
			j := i
			for j < len(states) && states[j] == Firing {
				j++
			}
			s := Stretch{Workload: w.ID, From: i, To: j, ReturnedAt: -1}
			for k := j; k < len(w.Activity); k++ {
				if !math.IsNaN(w.Activity[k]) && w.Activity[k] > busyAbove {
					s.ReturnedAt = k
					break
				}
			}
			out = append(out, s)
			i = j
		}
	}
	return out
}

// IdleMinutes counts the steps at which a workload held its GPU with
// activity at or below the threshold: the idle-held time in the history.
func IdleMinutes(h History, threshold float64) (idle, held int) {
	for _, w := range h.Workloads {
		for i := range w.Activity {
			if !w.present(i) {
				continue
			}
			held++
			if a, ok := w.activityAt(i); ok && a <= threshold {
				idle++
			}
		}
	}
	return idle, held
}

// stepsIn converts a duration to whole steps.
func (h *History) stepsIn(d time.Duration) int { return int(d / h.Step) }
