package packing

import "math"

// Replay is what a shared GPU would have seen on the steps after the plan.
type Replay struct {
	// Steps over the compute cap (summed activity) and over the GPU's
	// memory (summed memory used).
	OverCompute int `json:"steps_over_compute_cap"`
	OverMemory  int `json:"steps_over_memory"`
	// Overloaded counts the steps over the compute cap that sharing
	// caused: the sum passes it while no workload alone does.
	Overloaded int `json:"steps_overloaded_by_sharing"`
	// The worst step's summed activity and memory.
	WorstActivity    float64 `json:"worst_activity"`
	WorstMemoryBytes float64 `json:"worst_memory_bytes"`
	// Workloads over their own memory limit, at some step.
	OverLimit []string `json:"over_their_limit,omitempty"`
}

// Summary is the fleet before and after, on the replayed steps.
type Summary struct {
	Workloads int `json:"workloads"`
	Packed    int `json:"packed"`
	// GPUsBefore: one per workload that holds a GPU in the replayed steps;
	// GPUsAfter: the shared GPUs any of whose workloads does, and one per
	// such workload not packed (a workload new in the replay included).
	GPUsBefore int     `json:"gpus_before"`
	GPUsAfter  int     `json:"gpus_after"`
	FreedShare float64 `json:"freed_share"`
	// GPU-minutes of the shared GPUs over the compute cap, overloaded by
	// sharing, and over memory, as shares of all GPU-minutes after.
	GPUMinutes          float64 `json:"gpu_minutes_after"`
	OverComputeShare    float64 `json:"over_compute_share"`
	OverloadedShare     float64 `json:"overloaded_share"`
	OverMemoryShare     float64 `json:"over_memory_share"`
	EffectiveUtilBefore float64 `json:"effective_utilization_before"`
	EffectiveUtilAfter  float64 `json:"effective_utilization_after"`
	// OverTheirLimit counts the packed workloads that passed their own
	// memory limit at some replayed step: under MPS, an out-of-memory error.
	OverTheirLimit int `json:"workloads_over_their_limit"`
	// CostSaved is the freed GPU-hours of the replayed steps, priced.
	CostSaved float64 `json:"cost_saved"`
	Currency  string  `json:"currency,omitempty"`
	Hours     float64 `json:"hours_replayed"`
}

// presentInReplay says whether workload i holds a GPU at some replayed step.
func (p *Plan) presentInReplay(i, split int) bool {
	m := p.Advice[i].Workload.Memory
	for t := split; t < min(p.Steps, len(m)); t++ {
		if !math.IsNaN(m[t]) {
			return true
		}
	}
	return false
}

// replay plays the replayed steps on the plan's GPUs and totals the fleet.
func (p *Plan) replay(split int) {
	o := p.Options
	capacity := float64(o.Model.MemoryMB << 20)
	byID := map[string]*Advice{}
	for i := range p.Advice {
		byID[p.Advice[i].ID] = &p.Advice[i]
	}
	s := &p.Summary
	s.Workloads = len(p.Advice)
	steps := p.Steps - split
	var work float64
	live := map[int]bool{} // shared GPUs in use in the replay
	for i, a := range p.Advice {
		for t := split; t < p.Steps; t++ {
			work += at(a.Workload.Activity, t)
		}
		if a.GPU >= 0 {
			s.Packed++
		}
		if !p.presentInReplay(i, split) {
			continue
		}
		s.GPUsBefore++
		if a.GPU < 0 {
			s.GPUsAfter++
		} else {
			live[a.GPU] = true
		}
	}
	s.GPUsAfter += len(live)
	for gi := range p.GPUs {
		g := &p.GPUs[gi]
		over := map[string]bool{}
		for t := split; t < p.Steps; t++ {
			var act, mem, alone float64
			for _, id := range g.Workloads {
				a := byID[id]
				act += at(a.Workload.Activity, t)
				alone = max(alone, at(a.Workload.Activity, t))
				m := at(a.Workload.Memory, t)
				mem += m
				if m > a.Fit.MemoryLimitBytes {
					over[id] = true
				}
			}
			if act > o.ComputeCap {
				g.Replay.OverCompute++
				if alone <= o.ComputeCap {
					g.Replay.Overloaded++
				}
			}
			if mem > capacity {
				g.Replay.OverMemory++
			}
			g.Replay.WorstActivity = math.Max(g.Replay.WorstActivity, act)
			g.Replay.WorstMemoryBytes = math.Max(g.Replay.WorstMemoryBytes, mem)
		}
		for _, id := range g.Workloads {
			if over[id] {
				g.Replay.OverLimit = append(g.Replay.OverLimit, id)
				s.OverTheirLimit++
			}
		}
		s.OverComputeShare += float64(g.Replay.OverCompute)
		s.OverloadedShare += float64(g.Replay.Overloaded)
		s.OverMemoryShare += float64(g.Replay.OverMemory)
	}
	s.GPUMinutes = float64(s.GPUsAfter*steps) * o.Step.Minutes()
	if s.GPUsAfter > 0 {
		s.OverComputeShare /= float64(s.GPUsAfter * steps)
		s.OverloadedShare /= float64(s.GPUsAfter * steps)
		s.OverMemoryShare /= float64(s.GPUsAfter * steps)
		s.EffectiveUtilAfter = work / float64(s.GPUsAfter*steps)
	}
	if s.GPUsBefore > 0 {
		s.FreedShare = float64(s.GPUsBefore-s.GPUsAfter) / float64(s.GPUsBefore)
		s.EffectiveUtilBefore = work / float64(s.GPUsBefore*steps)
	}
	s.Hours = float64(steps) * o.Step.Hours()
	s.CostSaved = float64(s.GPUsBefore-s.GPUsAfter) * s.Hours * o.CostPerGPUHour
	s.Currency = o.Currency
}
