package packing

import (
	"math"
	"slices"
)

// Limits of the exact search: past them the plan stays first fit's and
// the report says the optimum was not proven.
const (
	// maxGroups bounds the groups of workloads that fit one GPU.
	maxGroups = 200_000
	// maxNodes bounds the search's steps.
	maxNodes = 2_000_000
)

// Exact is what the exact search found.
type Exact struct {
	// GPUs is the fewest shared and unshared GPUs the packable workloads
	// can be placed on within the caps, when Proven; else the fewest found.
	GPUs int `json:"gpus"`
	// FirstFit is what first fit places them on.
	FirstFit int  `json:"first_fit_gpus"`
	Proven   bool `json:"proven"`
	// Groups counts the groups of packable workloads that fit one GPU.
	Groups int `json:"groups"`
	Nodes  int `json:"nodes"`
	// LowerBound is the linear relaxation's bound, rounded up: no plan
	// within the caps takes fewer GPUs.
	LowerBound int `json:"lower_bound"`
}

// exactGroups finds the fewest GPUs the packable workloads fit on, every
// GPU within the caps at the planning steps: it lists every group that
// fits one GPU (a group's subsets fit too, so a cover is a partition), then
// searches the partitions depth first, each time covering the workload
// with the fewest groups left, largest groups first, and prunes a branch
// that cannot beat the best found. It starts from first fit's plan, so it
// never does worse, and gives that plan back, not proven, when the groups
// pass their limit.
func (p *Plan) exactGroups(packable []int, firstFit [][]int, split int) ([][]int, *Exact) {
	o := &p.Options
	n := len(packable)
	ex := &Exact{FirstFit: len(firstFit), GPUs: len(firstFit)}
	if n == 0 {
		ex.Proven = true
		return firstFit, ex
	}
	// Every group that fits, grown one workload at a time from each
	// workload and only with later ones: each group is found once.
	var groups [][]int
	var grow func(b *bin, members []int, next int) bool
	grow = func(b *bin, members []int, next int) bool {
		groups = append(groups, slices.Clone(members))
		if len(groups) > maxGroups {
			return false
		}
		for y := next; y < n; y++ {
			a := &p.Advice[packable[y]]
			if !b.takes(a, o, split) {
				continue
			}
			b.add(packable[y], a, o.Headroom)
			ok := grow(b, append(members, y), y+1)
			b.remove(a, o.Headroom)
			if !ok {
				return false
			}
		}
		return true
	}
	b := newBin(split)
	for x := range n {
		a := &p.Advice[packable[x]]
		b.add(packable[x], a, o.Headroom)
		ok := grow(b, []int{x}, x+1)
		b.remove(a, o.Headroom)
		if !ok {
			ex.Groups = len(groups)
			return firstFit, ex
		}
	}
	ex.Groups = len(groups)
	// Largest first, so the first cover found is a good one.
	slices.SortStableFunc(groups, func(a, b []int) int { return len(b) - len(a) })
	of := make([][]int, n) // the groups each workload is in
	for g, members := range groups {
		for _, x := range members {
			of[x] = append(of[x], g)
		}
	}
	floor, prices := lpDuals(n, groups)
	ex.LowerBound = int(math.Ceil(floor - 1e-6))
	covered := make([]bool, n)
	var chosen, best []int
	bestCount := len(firstFit)
	left := n
	ex.Proven = true
	var search func()
	search = func() {
		if ex.Nodes++; ex.Nodes > maxNodes {
			ex.Proven = false
			return
		}
		if left == 0 {
			if len(chosen) < bestCount {
				bestCount, best = len(chosen), slices.Clone(chosen)
			}
			return
		}
		// Each GPU holds its workloads, so a workload whose largest free
		// group has k of them counts at least 1/k GPU: no plan of the
		// workloads left takes fewer GPUs than their sum. The workload with
		// the fewest free groups is covered next.
		var need, priced float64
		pick, options := -1, math.MaxInt
		for x := range n {
			if covered[x] {
				continue
			}
			c, k := 0, 1
			for _, g := range of[x] {
				if free(groups[g], covered) {
					c++
					k = max(k, len(groups[g]))
				}
			}
			need += 1 / float64(k)
			priced += prices[x]
			if c < options {
				pick, options = x, c
			}
		}
		if len(chosen)+int(math.Ceil(max(need, priced)-1e-6)) >= bestCount {
			return
		}
		for _, g := range of[pick] {
			if !free(groups[g], covered) {
				continue
			}
			for _, x := range groups[g] {
				covered[x] = true
			}
			left -= len(groups[g])
			chosen = append(chosen, g)
			search()
			chosen = chosen[:len(chosen)-1]
			left += len(groups[g])
			for _, x := range groups[g] {
				covered[x] = false
			}
			if !ex.Proven {
				return
			}
		}
	}
	search()
	ex.GPUs = bestCount
	if best == nil {
		return firstFit, ex
	}
	out := make([][]int, 0, len(best))
	for _, g := range best {
		members := make([]int, len(groups[g]))
		for k, x := range groups[g] {
			members[k] = packable[x]
		}
		out = append(out, members)
	}
	return out, ex
}

// free says whether none of the group's workloads is covered yet.
func free(group []int, covered []bool) bool {
	for _, x := range group {
		if covered[x] {
			return false
		}
	}
	return true
}

// remove takes back the last add of a; the bin's domains are left as they
// are (the search reads only its sums).
func (b *bin) remove(a *Advice, headroom float64) {
	b.members = b.members[:len(b.members)-1]
	b.memory -= a.Fit.MemoryLimitBytes
	for t := range b.activity {
		b.activity[t] -= at(a.Workload.Activity, t)
		b.used[t] -= at(a.Workload.Memory, t) * (1 + headroom)
	}
}

// lpDuals solves the linear relaxation of the partition of n workloads
// into groups (every group a column, every workload a row, one GPU a
// group) with the revised simplex, starting from the groups of one. It
// returns dual prices, a price per workload such that no group's prices
// sum past one GPU, and their sum: the prices of any set of workloads
// bound the GPUs they need from below, and at the relaxation's optimum
// their sum is its value.
func lpDuals(n int, groups [][]int) (float64, []float64) {
	// The basis starts as the singletons (an identity); inv is its inverse.
	basis := make([]int, n)
	for g, members := range groups {
		if len(members) == 1 {
			basis[members[0]] = g
		}
	}
	inv := make([][]float64, n)
	for i := range inv {
		inv[i] = make([]float64, n)
		inv[i][i] = 1
	}
	x := make([]float64, n) // the basic values
	for i := range x {
		x[i] = 1
	}
	y := make([]float64, n)
	d := make([]float64, n)
	const eps = 1e-9
	for iter := 0; iter < 50*n+1000; iter++ {
		// Prices: every basic column costs 1, so y is the column sums of inv.
		for j := range y {
			y[j] = 0
			for i := range n {
				y[j] += inv[i][j]
			}
		}
		// Entering: the lowest reduced cost 1 - Σ y over the group (Bland's
		// rule, the first negative one, after a run of degenerate pivots).
		enter, best := -1, -eps
		bland := iter > 20*n
		for g, members := range groups {
			rc := 1.0
			for _, i := range members {
				rc -= y[i]
			}
			if rc < best {
				enter, best = g, rc
				if bland {
					break
				}
			}
		}
		if enter < 0 {
			break
		}
		for i := range n { // inv times the entering column
			d[i] = 0
			for _, k := range groups[enter] {
				d[i] += inv[i][k]
			}
		}
		leave, ratio := -1, math.Inf(1)
		for i := range n {
			if d[i] > eps {
				if r := x[i] / d[i]; r < ratio-eps || (r < ratio+eps && leave >= 0 && basis[i] < basis[leave]) {
					leave, ratio = i, r
				}
			}
		}
		if leave < 0 {
			break // unbounded: cannot happen with costs of one
		}
		piv := d[leave]
		for j := range n {
			inv[leave][j] /= piv
		}
		x[leave] /= piv
		for i := range n {
			if i == leave || d[i] == 0 {
				continue
			}
			f := d[i]
			for j := range n {
				inv[i][j] -= f * inv[leave][j]
			}
			x[i] -= f * x[leave]
		}
		basis[leave] = enter
	}
	// Scale the prices into feasibility, so that rounding never bounds
	// above the truth: no group's prices may pass one.
	scale := 1.0
	for _, members := range groups {
		var s float64
		for _, i := range members {
			s += max(y[i], 0)
		}
		if s > 1 {
			scale = min(scale, 1/s)
		}
	}
	// Any prices that pass no group bound the GPUs from below (weak
	// duality), whether or not the simplex reached the optimum.
	var bound float64
	for i := range y {
		y[i] = max(y[i], 0) * scale
		bound += y[i]
	}
	return bound, y
}
