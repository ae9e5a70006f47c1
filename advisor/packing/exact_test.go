package packing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fewestGPUs tries every partition of the packable workloads into groups
// that fit one GPU: the optimum, by brute force.
func fewestGPUs(p *Plan, packable []int, split int) int {
	best := math.MaxInt
	var try func(k int, bins []*bin)
	try = func(k int, bins []*bin) {
		if len(bins) >= best {
			return
		}
		if k == len(packable) {
			best = len(bins)
			return
		}
		a := &p.Advice[packable[k]]
		for j, b := range bins {
			if b.takes(a, &p.Options, split) {
				nb := b.clone()
				nb.add(packable[k], a, p.Options.Headroom)
				bins[j] = nb
				try(k+1, bins)
				bins[j] = b
			}
		}
		nb := newBin(split)
		nb.add(packable[k], a, p.Options.Headroom)
		try(k+1, append(bins, nb))
	}
	try(0, nil)
	return best
}

// randomWorkloads are n workloads of random memory and random bursts.
func randomWorkloads(r *rand.Rand, n int) []Workload {
	var ws []Workload
	for i := range n {
		w := Workload{ID: string(rune('a' + i)), Domain: "ml", Owner: "ml"}
		mem := float64(4+r.IntN(30)) * gib
		level := 0.1 + 0.5*r.Float64()
		for range 2 * 60 {
			a := 0.01
			if r.Float64() < 0.3 {
				a = level
			}
			w.Activity = append(w.Activity, a)
			w.Memory = append(w.Memory, mem)
		}
		ws = append(ws, w)
	}
	return ws
}

// The exact search finds the optimum a brute force finds on small
// instances, never does worse than first fit, and its lower bound never
// passes the optimum; on some of them first fit is not optimal.
func TestExactSearchFindsTheOptimum(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 7))
	firstFitWorse := 0
	for c := range 60 {
		ws := randomWorkloads(r, 5+c%4)
		o := DefaultOptions()
		o.ComputeSlack = 0
		p, err := Make(ws, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), o)
		require.NoError(t, err)
		var packable []int
		for i, a := range p.Advice {
			if fitOf(&a.Workload, a.Activity, a.Memory, &o).Kind == FitPackable {
				packable = append(packable, i)
			}
		}
		ex := p.Exact
		require.NotNil(t, ex)
		require.True(t, ex.Proven, "case %d", c)
		opt := fewestGPUs(p, packable, p.PlanSteps)
		require.Equal(t, opt, ex.GPUs, "case %d", c)
		require.LessOrEqual(t, ex.GPUs, ex.FirstFit, "case %d", c)
		require.LessOrEqual(t, ex.LowerBound, opt, "case %d", c)
		if ex.FirstFit > opt {
			firstFitWorse++
		}
		// The plan is the exact one: its shared GPUs and lone workloads.
		gpus := len(p.GPUs)
		for _, i := range packable {
			if p.Advice[i].GPU < 0 {
				gpus++
			}
		}
		require.Equal(t, opt, gpus, "case %d", c)
	}
	t.Logf("first fit missed the optimum on %d of 60", firstFitWorse)
	require.Positive(t, firstFitWorse, "no instance where first fit misses the optimum: the test tests nothing")
}

// Six idle workloads whose memory fits two GPUs in one way only: first
// fit, largest first, needs three; the search finds two, and the
// relaxation's bound proves it.
func TestExactSearchKnownOptimum(t *testing.T) {
	o := DefaultOptions()
	whole := usableMemory(&o) / (1 + o.Headroom) // the memory two GPUs' plans add up to
	var ws []Workload
	for i, share := range []float64{0.499, 0.399, 0.399, 0.299, 0.199, 0.199} {
		w := Workload{ID: string(rune('a' + i)), Domain: "ml", Owner: "ml"}
		for range 2 * 60 {
			w.Activity = append(w.Activity, 0.01)
			w.Memory = append(w.Memory, share*whole)
		}
		ws = append(ws, w)
	}
	p, err := Make(ws, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), o)
	require.NoError(t, err)
	require.Equal(t, 3, p.Exact.FirstFit)
	require.Equal(t, 2, p.Exact.GPUs)
	require.Equal(t, 2, p.Exact.LowerBound)
	require.True(t, p.Exact.Proven)
	require.Len(t, p.GPUs, 2)
}

// A day of 40 workloads planned on its first half: first fit alone, and
// with the exact search (its groups, the relaxation, the search).
func BenchmarkPlan(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	var ws []Workload
	for i := range 40 {
		w := Workload{ID: fmt.Sprint(i), Domain: "ml", Owner: "ml"}
		mem := float64(10+r.IntN(20)) * gib
		for range 24 * 60 {
			a := 0.01
			if r.Float64() < 0.1 {
				a = 0.2 + 0.5*r.Float64()
			}
			w.Activity = append(w.Activity, a)
			w.Memory = append(w.Memory, mem)
		}
		ws = append(ws, w)
	}
	for _, exact := range []bool{false, true} {
		b.Run(fmt.Sprintf("exact=%v", exact), func(b *testing.B) {
			o := DefaultOptions()
			o.Exact = exact
			for b.Loop() {
				p, err := Make(ws, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), o)
				if err != nil {
					b.Fatal(err)
				}
				if exact && !p.Exact.Proven {
					b.Fatal("not proven")
				}
			}
		})
	}
}

func (b *bin) clone() *bin {
	c := &bin{members: slices.Clone(b.members), domains: map[string]bool{}, memory: b.memory,
		activity: slices.Clone(b.activity), used: slices.Clone(b.used)}
	for d := range b.domains {
		c.domains[d] = true
	}
	return c
}
