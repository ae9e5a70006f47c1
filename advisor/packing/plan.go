package packing

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Workload is one workload's measured use: one value per step from the
// history's start, NaN where it was not sampled.
type Workload struct {
	ID string `json:"id"`
	// Domain is its trust domain (a namespace, or a configured group): MPS,
	// which isolates no memory, is proposed only within one.
	Domain string `json:"domain"`
	// Owner is who is told the change (a namespace, a team).
	Owner string `json:"owner"`
	// Exclusive workloads are never packed (gpureclaim.io/exclusive on the
	// pod or its top owner, or a latency-sensitive class); ExclusiveWhy says which.
	Exclusive    bool   `json:"exclusive,omitempty"`
	ExclusiveWhy string `json:"exclusive_why,omitempty"`
	// Activity is SM activity or utilization (0-1); Memory is bytes used.
	Activity []float64 `json:"-"`
	Memory   []float64 `json:"-"`
}

// Options are the plan's limits.
type Options struct {
	// Model is the GPU model every workload runs on (its memory and MIG table).
	Model gpus.Config
	// ComputeCap bounds the summed activity on a shared GPU at every step
	// of the planning window, but for ComputeSlack of them: 1, the GPU's
	// capacity (a duty cycle cannot pass it, and two workloads that sum to
	// it take turns).
	ComputeCap float64
	// ComputeSlack is the share of planning steps a shared GPU's summed
	// activity may pass ComputeCap: work that waits a little, not memory
	// that overflows (0.05).
	ComputeSlack float64
	// MemoryCap bounds the summed memory limits on a shared GPU, as a
	// share of its memory (names.PackMemoryCap).
	MemoryCap float64
	// Headroom is added to each workload's memory peak to make its limit (0.1).
	Headroom float64
	// MemoryBySeries packs by the summed memory at every planning step
	// (with headroom) rather than by the summed peaks: workloads whose
	// peaks do not meet share a GPU.
	MemoryBySeries bool
	// PlanShare is the share of the history the plan is made on; the rest
	// replays it (0.5).
	PlanShare float64
	// Step is the history's sampling interval.
	Step time.Duration
	// CostPerGPUHour prices a GPU-hour (the rules' cost config); 0 leaves cost out.
	CostPerGPUHour float64
	Currency       string
	// Exact searches for the plan on the fewest GPUs (exactGroups) and
	// keeps it over first fit's when it finds one.
	Exact bool
	// Bound also checks every pair and triple of packable workloads for
	// the fewest GPUs any plan within the caps could hold (Plan.Bound).
	Bound bool
}

// DefaultOptions are the limits the advisor plans with unless told.
func DefaultOptions() Options {
	return Options{Model: gpus.H100_SXM5_80GB, ComputeCap: names.PackComputeCap, MemoryCap: names.PackMemoryCap, Headroom: names.PackHeadroom, ComputeSlack: 0.05, MemoryBySeries: true, PlanShare: 0.5, Step: time.Minute, Exact: true}
}

// Sharing mechanisms of a shared GPU.
const (
	// SharingMPS: every workload is in one trust domain; each gets a
	// pinned-memory limit and an active-thread share.
	SharingMPS = "mps"
	// SharingTimeSlicing: workloads of several trust domains; memory limits
	// are the workloads' own (a framework's memory fraction).
	SharingTimeSlicing = "time-slicing"
)

// GPU is one shared GPU of the plan.
type GPU struct {
	Index     int      `json:"index"`
	Sharing   string   `json:"sharing"`
	Workloads []string `json:"workloads"`
	// MemoryLimitBytes sums the workloads' limits.
	MemoryLimitBytes float64 `json:"memory_limit_bytes"`
	// PeakActivity is the planning window's highest summed activity.
	PeakActivity float64 `json:"peak_activity_planned"`
	Replay       Replay  `json:"replay"`
}

// Advice is one workload's stats, fit and place in the plan.
type Advice struct {
	Workload
	Activity Stats `json:"activity"`
	Memory   Stats `json:"memory"`
	Fit      Fit   `json:"fit"`
	// GPU is the shared GPU it is placed on; -1 when it is not packed.
	GPU int `json:"gpu"`
	// Change is what its owner changes, ready to paste.
	Change string `json:"change,omitempty"`
}

// Plan is the advice for a fleet.
type Plan struct {
	Options   Options   `json:"-"`
	Start     time.Time `json:"start"`
	Steps     int       `json:"steps"`
	PlanSteps int       `json:"plan_steps"`
	Advice    []Advice  `json:"workloads"`
	GPUs      []GPU     `json:"shared_gpus"`
	Summary   Summary   `json:"summary"`
	Bound     *Bound    `json:"bound,omitempty"`
	// Exact is the exact search's result, when it ran (Options.Exact).
	Exact *Exact `json:"exact,omitempty"`
}

// Make plans on the first PlanShare of the steps and replays the rest.
func Make(ws []Workload, start time.Time, o Options) (*Plan, error) {
	if len(ws) == 0 {
		return nil, fmt.Errorf("no workloads in the history")
	}
	steps := 0
	for _, w := range ws {
		steps = max(steps, len(w.Activity), len(w.Memory))
	}
	split := int(float64(steps) * o.PlanShare)
	if split < 1 || split >= steps {
		return nil, fmt.Errorf("plan share %.2f of %d steps leaves no step to plan on or to replay", o.PlanShare, steps)
	}
	p := &Plan{Options: o, Start: start, Steps: steps, PlanSteps: split}
	for _, w := range ws {
		act, mem := window(w.Activity, 0, split), window(w.Memory, 0, split)
		a := Advice{Workload: w, Activity: statsOf(act, o.Step), Memory: statsOf(mem, o.Step), GPU: -1}
		a.Fit = fitOf(&w, a.Activity, a.Memory, &o)
		p.Advice = append(p.Advice, a)
	}
	var packable []int
	for i, a := range p.Advice {
		if a.Fit.Kind == FitPackable {
			packable = append(packable, i)
		}
	}
	p.place(split)
	p.replay(split)
	if o.Bound {
		p.Bound = p.bound(packable, split)
	}
	p.changes()
	return p, nil
}

// window returns vs[from:to], NaN past its end.
func window(vs []float64, from, to int) []float64 {
	out := make([]float64, to-from)
	for i := range out {
		out[i] = math.NaN()
		if from+i < len(vs) {
			out[i] = vs[from+i]
		}
	}
	return out
}

func at(vs []float64, i int) float64 {
	if i < len(vs) && !math.IsNaN(vs[i]) {
		return vs[i]
	}
	return 0
}

// bin is a shared GPU being filled.
type bin struct {
	members  []int
	domains  map[string]bool
	memory   float64
	activity []float64 // summed, per planning step
	used     []float64 // summed memory with headroom, per planning step
}

// place packs the packable workloads: first fit, largest memory limit
// first (a workload joins the first GPU where the summed limits stay under
// the memory cap and the summed activity under the compute cap at every
// planning step), then the exact search, which keeps first fit's plan
// unless it finds one on fewer GPUs. A GPU left with one workload is no
// sharing: it keeps its GPU.
func (p *Plan) place(split int) {
	o := p.Options
	usable := usableMemory(&o)
	var order []int
	for i, a := range p.Advice {
		if a.Fit.Kind == FitPackable {
			order = append(order, i)
		}
	}
	// Hardest first: the busiest and largest workloads choose their
	// partners while many are left.
	hard := func(i int) float64 {
		a := &p.Advice[i]
		return a.Activity.P99/o.ComputeCap + a.Fit.MemoryLimitBytes/usable
	}
	sort.SliceStable(order, func(x, y int) bool { return hard(order[x]) > hard(order[y]) })
	var bins []*bin
	for _, i := range order {
		a := &p.Advice[i]
		placed := false
		for _, b := range bins {
			if !b.takes(a, &o, split) {
				continue
			}
			b.add(i, a, o.Headroom)
			placed = true
			break
		}
		if !placed {
			b := newBin(split)
			b.add(i, a, o.Headroom)
			bins = append(bins, b)
		}
	}
	groups := make([][]int, len(bins))
	for k, b := range bins {
		groups[k] = b.members
	}
	if o.Exact {
		groups, p.Exact = p.exactGroups(order, groups, split)
	}
	for _, members := range groups {
		if len(members) < 2 {
			// No partner: a smaller slice, or its own GPU.
			f := &p.Advice[members[0]].Fit
			f.Kind, f.Why = FitWhole, f.Why+"; no workload shares a GPU with it within the caps"
			if f.Profile != "" {
				f.Kind = FitMIG
			}
			continue
		}
		b := newBin(split)
		for _, i := range members {
			b.add(i, &p.Advice[i], o.Headroom)
		}
		g := GPU{Index: len(p.GPUs), Sharing: SharingMPS, MemoryLimitBytes: b.memory}
		if len(b.domains) > 1 {
			g.Sharing = SharingTimeSlicing
		}
		for _, i := range members {
			g.Workloads = append(g.Workloads, p.Advice[i].ID)
			p.Advice[i].GPU = g.Index
		}
		for _, v := range b.activity {
			g.PeakActivity = max(g.PeakActivity, v)
		}
		p.GPUs = append(p.GPUs, g)
	}
}

func newBin(steps int) *bin {
	return &bin{domains: map[string]bool{}, activity: make([]float64, steps), used: make([]float64, steps)}
}

// usableMemory is the memory a shared GPU's workloads may fill.
func usableMemory(o *Options) float64 { return float64(o.Model.MemoryMB<<20) * o.MemoryCap }

// takes says whether a joins the bin within the caps at the planning steps.
func (b *bin) takes(a *Advice, o *Options, split int) bool {
	usable := usableMemory(o)
	if !fitsMostly(b.activity, a.Workload.Activity, o.ComputeCap, int(o.ComputeSlack*float64(split))) {
		return false
	}
	if o.MemoryBySeries {
		return fits(b.used, a.Workload.Memory, 1+o.Headroom, usable)
	}
	return b.memory+a.Fit.MemoryLimitBytes <= usable
}

func (b *bin) add(i int, a *Advice, headroom float64) {
	b.members = append(b.members, i)
	b.domains[a.Domain] = true
	b.memory += a.Fit.MemoryLimitBytes
	for t := range b.activity {
		b.activity[t] += at(a.Workload.Activity, t)
		b.used[t] += at(a.Workload.Memory, t) * (1 + headroom)
	}
}

// fitsMostly says whether adding vs keeps the sum under limit at all but
// at most slack steps.
func fitsMostly(sum, vs []float64, limit float64, slack int) bool {
	over := 0
	for t := range sum {
		if sum[t]+at(vs, t) > limit {
			if over++; over > slack {
				return false
			}
		}
	}
	return true
}

// fits says whether adding vs (times scale) keeps every step's sum under limit.
func fits(sum, vs []float64, scale, limit float64) bool {
	for t := range sum {
		if sum[t]+at(vs, t)*scale > limit {
			return false
		}
	}
	return true
}

func timeSteps(n int) time.Duration { return time.Duration(n) }
