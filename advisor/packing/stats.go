// Package packing plans, from measured use, which GPU workloads can share
// a GPU or fit a smaller MIG slice: each workload's activity and memory
// over a history, a fit for each, a placement of the packable ones on
// shared GPUs, and a replay of that placement on a stretch of history it
// was not made on.
package packing

import (
	"math"
	"sort"
	"time"
)

// Stats summarize one signal of a workload over the steps it was sampled.
type Stats struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	// TrendPerDay is the least-squares slope, per day.
	TrendPerDay float64 `json:"trend_per_day"`
	Samples     int     `json:"samples"`
}

// statsOf summarizes vs (NaN: not sampled), one value per step.
func statsOf(vs []float64, step time.Duration) Stats {
	var xs, ts []float64
	for i, v := range vs {
		if !math.IsNaN(v) {
			xs = append(xs, v)
			ts = append(ts, float64(i))
		}
	}
	if len(xs) == 0 {
		return Stats{}
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	q := func(p float64) float64 {
		return sorted[min(len(sorted)-1, int(math.Ceil(p*float64(len(sorted))))-1)]
	}
	s := Stats{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: sorted[len(sorted)-1], Samples: len(xs)}
	if len(xs) > 1 {
		var mt, mx float64
		for i := range xs {
			mt += ts[i]
			mx += xs[i]
		}
		mt, mx = mt/float64(len(xs)), mx/float64(len(xs))
		var num, den float64
		for i := range xs {
			num += (ts[i] - mt) * (xs[i] - mx)
			den += (ts[i] - mt) * (ts[i] - mt)
		}
		if den > 0 {
			s.TrendPerDay = num / den * float64(24*time.Hour/step)
		}
	}
	return s
}
