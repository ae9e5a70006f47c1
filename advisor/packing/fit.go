package packing

import (
	"fmt"
	"math"
)

// How a workload fits.
const (
	// FitWhole keeps a whole GPU: busy, too large to share, or exclusive.
	FitWhole = "whole"
	// FitMIG fits a smaller MIG slice of its GPU model.
	FitMIG = "mig"
	// FitPackable can share a GPU with others.
	FitPackable = "packable"
)

// Fit is what a workload needs, measured on its own history.
type Fit struct {
	Kind string `json:"kind"`
	// Profile is the smallest MIG profile of its GPU model that holds its
	// memory peak with headroom and its activity; empty if only a whole GPU does.
	Profile string `json:"mig_profile,omitempty"`
	// MemoryLimitBytes is its memory peak with headroom: the limit it is
	// given where it shares a GPU.
	MemoryLimitBytes float64 `json:"memory_limit_bytes"`
	Why              string  `json:"why"`
}

// fitOf decides a workload's fit from its planning-window stats.
func fitOf(w *Workload, act, mem Stats, o *Options) Fit {
	capacity := float64(o.Model.MemoryMB << 20)
	f := Fit{MemoryLimitBytes: math.Ceil(mem.Max * (1 + o.Headroom))}
	// The smallest slice that holds the memory peak and whose share of the
	// SMs keeps the workload's p95 activity under the compute cap there.
	for _, p := range Profiles(o.Model) {
		if float64(p.MemoryBytes) >= f.MemoryLimitBytes && act.P95*7/float64(p.Slices) <= o.ComputeCap && p.Slices < 7 {
			f.Profile = p.Name
			break
		}
	}
	switch {
	case w.Exclusive:
		f.Kind, f.Why = FitWhole, "marked exclusive: "+w.ExclusiveWhy
	case act.Samples == 0 || mem.Samples == 0:
		f.Kind, f.Why = FitWhole, "no samples in the planning window"
	case f.MemoryLimitBytes > capacity*o.MemoryCap:
		f.Kind, f.Why = FitWhole, fmt.Sprintf("memory peak %s with headroom fills the GPU", gb(f.MemoryLimitBytes))
	default:
		f.Kind, f.Why = FitPackable, fmt.Sprintf("p95 activity %.1f%%, memory peak %s with headroom", 100*act.P95, gb(f.MemoryLimitBytes))
	}
	return f
}

func gb(bytes float64) string { return fmt.Sprintf("%.1f GB", bytes/1e9) }
