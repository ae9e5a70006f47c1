package packing

import "math"

// Bound is the fewest GPUs any plan within the caps could hold on the
// replayed steps: a check of how far the plan is from the best, not a plan.
type Bound struct {
	// Alone counts the packable workloads that no other one can share a
	// GPU with: each keeps its own.
	Alone int `json:"alone"`
	// Triples counts the groups of three packable workloads that fit one
	// GPU; Cover, workloads one of which is in every such group. A shared
	// GPU of k workloads holds at least k-2 of them (any three others would
	// fit without one), so the others go two to a GPU.
	Triples int `json:"triples"`
	Cover   int `json:"cover"`
	// GPUsAfter is at least this many; FreedShare at most this.
	GPUsAfter  int     `json:"gpus_after_at_least"`
	FreedShare float64 `json:"freed_share_at_most"`
}

// bound checks every pair and triple of the packable workloads against
// the caps the plan packs by: O(n³) groups over the planning steps, so
// it is asked for (--plan.bound), not run on every plan.
func (p *Plan) bound(packable []int, split int) *Bound {
	o := &p.Options
	fitsGroup := func(members ...int) bool {
		b := newBin(split)
		for n, i := range members {
			a := &p.Advice[i]
			if n > 0 && !b.takes(a, o, split) {
				return false
			}
			b.add(i, a, o.Headroom)
		}
		return true
	}
	n := len(packable)
	pair := make([][]bool, n)
	for x := range pair {
		pair[x] = make([]bool, n)
	}
	alone := make([]bool, n)
	for x := range n {
		alone[x] = true
	}
	for x := range n {
		for y := x + 1; y < n; y++ {
			if fitsGroup(packable[x], packable[y]) {
				pair[x][y], pair[y][x] = true, true
				alone[x], alone[y] = false, false
			}
		}
	}
	var triples [][3]int
	for x := range n {
		for y := x + 1; y < n; y++ {
			if !pair[x][y] {
				continue
			}
			for z := y + 1; z < n; z++ {
				if pair[x][z] && pair[y][z] && fitsGroup(packable[x], packable[y], packable[z]) {
					triples = append(triples, [3]int{x, y, z})
				}
			}
		}
	}
	// A greedy cover: the workload in most uncovered triples, until none is left.
	cover := 0
	for left := triples; len(left) > 0; {
		count := make([]int, n)
		best := 0
		for _, t := range left {
			for _, x := range t {
				if count[x]++; count[x] > count[best] {
					best = x
				}
			}
		}
		cover++
		kept := left[:0:0]
		for _, t := range left {
			if t[0] != best && t[1] != best && t[2] != best {
				kept = append(kept, t)
			}
		}
		left = kept
	}
	inPlan := map[int]bool{}
	for _, i := range packable {
		inPlan[i] = true
	}
	bd := &Bound{Triples: len(triples), Cover: cover}
	sharing := 0
	for i := range p.Advice {
		if !p.presentInReplay(i, split) {
			continue
		}
		switch {
		case !inPlan[i]:
			bd.GPUsAfter++ // never packed: its own GPU, or a slice
		case alone[indexOf(packable, i)]:
			bd.Alone++
			bd.GPUsAfter++
		default:
			sharing++
		}
	}
	bd.GPUsAfter += int(math.Ceil(float64(max(0, sharing-cover)) / 2))
	if before := p.Summary.GPUsBefore; before > 0 {
		bd.FreedShare = float64(before-bd.GPUsAfter) / float64(before)
	}
	return bd
}

func indexOf(xs []int, v int) int {
	for i, x := range xs {
		if x == v {
			return i
		}
	}
	return -1
}
