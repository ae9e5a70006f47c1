package packing

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const gib = 1 << 30

// synthetic is a day of minutes: busy (activity 0.8) in the hours busy
// says, idle (0.02) elsewhere, holding mem bytes throughout.
func synthetic(id, domain string, busy func(hour int) bool, mem float64) Workload {
	w := Workload{ID: id, Domain: domain, Owner: domain}
	for m := 0; m < 2*24*60; m++ {
		a := 0.02
		if busy((m / 60) % 24) {
			a = 0.8
		}
		w.Activity = append(w.Activity, a)
		w.Memory = append(w.Memory, mem)
	}
	return w
}

func day(h int) bool   { return h >= 8 && h < 20 }
func night(h int) bool { return !day(h) }

func plan(t *testing.T, ws ...Workload) *Plan {
	t.Helper()
	p, err := Make(ws, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), DefaultOptions())
	require.NoError(t, err)
	return p
}

// Busy at opposite hours, the two share one GPU and never overload it.
func TestOppositeHoursPack(t *testing.T) {
	p := plan(t, synthetic("day", "ml", day, 20*gib), synthetic("night", "ml", night, 20*gib))
	require.Len(t, p.GPUs, 1)
	require.ElementsMatch(t, []string{"day", "night"}, p.GPUs[0].Workloads)
	require.Equal(t, SharingMPS, p.GPUs[0].Sharing, "one namespace: MPS")
	require.Zero(t, p.GPUs[0].Replay.OverCompute)
	require.Zero(t, p.GPUs[0].Replay.OverMemory)
	require.Equal(t, 2, p.Summary.GPUsBefore)
	require.Equal(t, 1, p.Summary.GPUsAfter)
	require.InDelta(t, 0.5, p.Summary.FreedShare, 1e-9)
	require.InDelta(t, 2*p.Summary.EffectiveUtilBefore, p.Summary.EffectiveUtilAfter, 1e-9, "the same work on half the GPUs")
	require.Contains(t, p.Advice[0].Change, "nvidia.com/gpu.shared: 1")
	require.Contains(t, p.Advice[0].Change, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=22G")
}

// Peaking together, they would overload a GPU: each keeps its own.
func TestPeaksTogetherDoNotPack(t *testing.T) {
	p := plan(t, synthetic("a", "ml", day, 20*gib), synthetic("b", "ml", day, 20*gib))
	require.Empty(t, p.GPUs)
	require.Equal(t, 2, p.Summary.GPUsAfter)
	for _, a := range p.Advice {
		require.Equal(t, -1, a.GPU)
	}
}

// Memory that grows after the planning window is caught by the replay:
// the GPU goes over memory and the workload over its own limit.
func TestGrowthAfterThePlanIsCaught(t *testing.T) {
	grows := synthetic("grows", "ml", day, 30*gib)
	for m := len(grows.Memory) / 2; m < len(grows.Memory); m++ {
		grows.Memory[m] = 60 * gib
	}
	p := plan(t, grows, synthetic("steady", "ml", night, 30*gib))
	require.Len(t, p.GPUs, 1, "planned on the first day they fit")
	r := p.GPUs[0].Replay
	require.Equal(t, 24*60, r.OverMemory, "over the GPU's memory every replayed minute")
	require.Equal(t, []string{"grows"}, r.OverLimit)
	require.InDelta(t, 1.0, p.Summary.OverMemoryShare, 1e-9)
	var buf bytes.Buffer
	require.NoError(t, p.SVG(&buf))
	require.Contains(t, buf.String(), colourMemory, "drawn at risk")
}

// An exclusive workload is never packed, however idle.
func TestExclusiveIsNeverPacked(t *testing.T) {
	ex := synthetic("serving", "ml", func(int) bool { return false }, 10*gib)
	ex.Exclusive, ex.ExclusiveWhy = true, "pod annotated gpureclaim.io/exclusive"
	p := plan(t, ex, synthetic("a", "ml", day, 10*gib), synthetic("b", "ml", night, 10*gib))
	for _, a := range p.Advice {
		if a.ID == "serving" {
			require.Equal(t, -1, a.GPU)
			require.Equal(t, FitWhole, a.Fit.Kind)
			require.Contains(t, a.Fit.Why, "exclusive")
		}
	}
	require.Len(t, p.GPUs, 1)
	require.ElementsMatch(t, []string{"a", "b"}, p.GPUs[0].Workloads)
}

// Across namespaces the GPU is time-sliced, never MPS.
func TestNoMPSAcrossNamespaces(t *testing.T) {
	p := plan(t, synthetic("a", "team-a", day, 20*gib), synthetic("b", "team-b", night, 20*gib))
	require.Len(t, p.GPUs, 1)
	require.Equal(t, SharingTimeSlicing, p.GPUs[0].Sharing)
	for _, a := range p.Advice {
		require.NotContains(t, a.Change, "MPS")
		require.Contains(t, a.Change, "time-slicing")
	}
}

// A quiet workload alone gets the smallest MIG slice that holds it.
func TestSmallestSlice(t *testing.T) {
	p := plan(t, synthetic("lonely", "ml", func(h int) bool { return false }, 15*gib))
	a := p.Advice[0]
	require.Equal(t, "1g.20gb", a.Fit.Profile, "16.5 GiB with headroom: over 1g.10gb's memory")
	require.Equal(t, "resources.limits: {nvidia.com/mig-1g.20gb: 1} instead of nvidia.com/gpu: 1", a.Change)
	require.Equal(t, FitMIG, a.Fit.Kind)
}

// The bound is the fewest GPUs any plan within the caps holds.
func TestBoundIsTheFewestGPUsAnyPlanHolds(t *testing.T) {
	never := func(int) bool { return false }
	always := func(int) bool { return true }
	o := DefaultOptions()
	o.Bound = true
	for _, tc := range []struct {
		name                 string
		ws                   []Workload
		alone, triples, gpus int
	}{
		// Busy all day, it shares with none, nor does the day one with it.
		{"alone", []Workload{synthetic("busy", "ml", always, 10*gib), synthetic("day", "ml", day, 10*gib)}, 2, 0, 2},
		// Any two fit (2 x 33 GiB), no three (99 GiB): two GPUs at best.
		{"pairs only", []Workload{synthetic("a", "ml", never, 30*gib), synthetic("b", "ml", never, 30*gib), synthetic("c", "ml", never, 30*gib)}, 0, 0, 2},
		// Three small idle ones fit one GPU: one triple, one GPU.
		{"a triple", []Workload{synthetic("a", "ml", never, 10*gib), synthetic("b", "ml", never, 10*gib), synthetic("c", "ml", never, 10*gib)}, 0, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(tc.ws, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), o)
			require.NoError(t, err)
			require.Equal(t, tc.alone, p.Bound.Alone)
			require.Equal(t, tc.triples, p.Bound.Triples)
			require.Equal(t, tc.gpus, p.Bound.GPUsAfter)
			require.Equal(t, tc.gpus, p.Summary.GPUsAfter, "first-fit meets the bound here")
		})
	}
}
