// Package backtest replays recorded GPU activity through gpureclaim's own
// rules (with Prometheus's rule manager and PromQL engine) and its own
// reclaim policy (the reclaimer's engine), on a simulated clock, to ask
// what a rule set and a policy would have done to a fleet before they
// touch a GPU.
package backtest

import (
	"math"
	"sort"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/trace"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
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

// Workload is one owner of one unit: a pod, or a Unix user's processes.
type Workload struct {
	ID string
	// Owner is who is told: the pod's namespace, or the Unix user.
	Owner string
	// TopOwner is what runs the pod; a one-replica Deployment is a service.
	TopOwner reclaim.TopOwner
	// Activity (0-1) and Memory (bytes) per step; NaN where not sampled.
	Activity, Memory []float64
	// Series are the exporter's series that show the workload on its unit,
	// replayed while it holds the unit.
	Series []Series
	// key matches the workload's alerts (ownerKey).
	key string
	// held says when it held its unit, where the history says so apart
	// from its samples (an export's owner series).
	held []bool
}

// Series is one series of the exporter's, one value per step (NaN: none).
type Series struct {
	Labels labels.Labels
	Values []float64
}

// ownerKey identifies an owner of a unit by the labels its alerts carry.
func ownerKey(uuid, namespace, pod, user, slurmJob string) string {
	return uuid + "\xff" + namespace + "\xff" + pod + "\xff" + user + "\xff" + slurmJob
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

// traceNamespace is the namespace the trace's pods are replayed in.
const traceNamespace = "trace"

// unitMemory is the memory of the GPU each trace workload is replayed on.
const unitMemory = 80 << 30

// FromTrace turns a loaded trace (duty cycle and memory per pod and
// minute) into a history of utilization: each pod holds one GPU of its own.
// topOwner is what runs each pod (the trace does not say).
func FromTrace(tr *trace.Trace, topOwner reclaim.TopOwner) History {
	h := History{Start: tr.Start, Step: tr.Step, Signal: "utilization"}
	for _, id := range tr.Workloads() {
		h.Workloads = append(h.Workloads, traceWorkload(id, tr.Duty[id], tr.Memory[id], topOwner))
	}
	return h
}

func traceWorkload(id string, activity, memory []float64, topOwner reclaim.TopOwner) Workload {
	uuid := "GPU-" + id
	unit := []string{names.LabelUUID, uuid, names.LabelGPUUUID, uuid, "instance", "replay", "job", names.ExporterJob}
	name := func(n string, extra ...string) labels.Labels {
		return labels.FromStrings(append(append([]string{"__name__", n}, extra...), unit...)...)
	}
	present := make([]float64, len(activity))
	total := make([]float64, len(activity))
	for i := range activity {
		present[i], total[i] = math.NaN(), math.NaN()
		if !math.IsNaN(activity[i]) || !math.IsNaN(memory[i]) {
			present[i], total[i] = 1, unitMemory
		}
	}
	w := Workload{
		ID: id, Owner: traceNamespace, TopOwner: topOwner, Activity: activity, Memory: memory,
		key: ownerKey(uuid, traceNamespace, id, "", ""),
		Series: []Series{
			{name("gpureclaim_unit_info", "node", "replay", "kind", "gpu", "model", "replay"), present},
			{name("gpureclaim_unit_owner_info", "namespace", traceNamespace, "pod", id, "container", "main", "keep", "false"), present},
			{name("gpureclaim_unit_memory_total_bytes"), total},
			{name("gpureclaim_unit_utilization_ratio"), activity},
			{name("gpureclaim_unit_memory_used_bytes"), memory},
		},
	}
	if topOwner.Kind != "" {
		// What kube-state-metrics says of the pod's controller, for the
		// rules' idle classes.
		w.Series = append(w.Series, Series{labels.FromStrings("__name__", "kube_pod_owner", "namespace", traceNamespace, "pod", id,
			"owner_kind", podOwnerKind(topOwner.Kind), "owner_name", id, "owner_is_controller", "true", "job", "kube-state-metrics", "instance", "replay"), present})
	}
	return w
}

// podOwnerKind is the kind of a pod's controller (kube_pod_owner's
// owner_kind) under a top owner of the kind: a Deployment's pods are its
// ReplicaSet's, a Notebook's its StatefulSet's.
func podOwnerKind(top string) string {
	switch top {
	case "Deployment", "InferenceService":
		return "ReplicaSet"
	case "Notebook", "LeaderWorkerSet":
		return "StatefulSet"
	case "JobSet", "TrainJob", "CronJob":
		return "Job"
	case "RayJob":
		return "RayCluster"
	}
	return top
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
		c := w
		c.Activity, c.Memory = w.Activity[from:end], w.Memory[from:end]
		if w.held != nil {
			c.held = w.held[from:end]
		}
		c.Series = make([]Series, len(w.Series))
		for i, s := range w.Series {
			c.Series[i] = Series{s.Labels, s.Values[from:end]}
		}
		out.Workloads = append(out.Workloads, c)
	}
	sort.Slice(out.Workloads, func(i, j int) bool { return out.Workloads[i].ID < out.Workloads[j].ID })
	return out
}

// present says whether the workload held its unit at step i.
// span counts the steps from its first sample to its last.
func (w *Workload) span() int {
	first, last := -1, -1
	for i := range w.Activity {
		if w.present(i) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return 0
	}
	return last - first + 1
}

func (w *Workload) present(i int) bool {
	if w.held != nil {
		return i < len(w.held) && w.held[i]
	}
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

// idleAt says whether the workload held its unit idle at step i.
func (w *Workload) idleAt(i int, threshold float64) bool {
	a, ok := w.activityAt(i)
	return w.present(i) && ok && a <= threshold
}

// busyAt says whether work ran at step i (a sample above the threshold).
func (w *Workload) busyAt(i int, threshold float64) bool {
	return i < len(w.Activity) && !math.IsNaN(w.Activity[i]) && w.Activity[i] > threshold
}

// nextBusy is, per step, the next step with work (-1: none).
func nextBusy(w *Workload, threshold float64) []int {
	next, out := -1, make([]int, len(w.Activity))
	for k := len(w.Activity) - 1; k >= 0; k-- {
		out[k] = next
		if w.busyAt(k, threshold) {
			next = k
		}
	}
	return out
}

// IdleMinutes counts the steps at which a workload held its unit with
// activity at or below the threshold: the idle-held time in the history.
func IdleMinutes(h History, threshold float64) (idle, held int) {
	for _, w := range h.Workloads {
		for i := range w.Activity {
			if !w.present(i) {
				continue
			}
			held++
			if w.idleAt(i, threshold) {
				idle++
			}
		}
	}
	return idle, held
}
