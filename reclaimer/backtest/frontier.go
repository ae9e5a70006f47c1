package backtest

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// FrontierPoint is one variant's place on a frontier plot: the share of
// its reclaims regretted, its cold starts per workload-day, and the
// GPU-minutes it freed without regret, as a share of the reclaimable ones.
type FrontierPoint struct {
	Label                     string
	Regret, ColdStarts, Freed float64
	// Tuned: the figures of the tuned workloads, else of the held-apart
	// ones. Curve: a fixed wait, joined to the others of its set.
	Tuned, Curve bool
}

// PointOf places a set's figures on the frontier.
func PointOf(label string, f Figures) FrontierPoint {
	p := FrontierPoint{Label: label, Regret: f.RegretShare(), ColdStarts: f.ColdStartsPerWorkloadDay()}
	if f.ReclaimableMinutes > 0 {
		p.Freed = f.RegretFreeMinutes / f.ReclaimableMinutes
	}
	return p
}

// Axis is what a frontier plot sets the freed share against: the cost.
type Axis int

const (
	// ByRegret: the share of reclaims after which the work came back
	// within the regret window.
	ByRegret Axis = iota
	// ByColdStarts: how often, per workload-day, returning work waited for
	// its workload to start again (restore on demand).
	ByColdStarts
)

func (a Axis) of(p FrontierPoint) float64 {
	if a == ByColdStarts {
		return p.ColdStarts
	}
	return p.Regret
}

func (a Axis) title() string {
	if a == ByColdStarts {
		return "cold starts per workload-day (restores on demand)"
	}
	return "reclaims regretted (work back within the regret window)"
}

func (a Axis) tick(v float64) string {
	if a == ByColdStarts {
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprintf("%.0f%%", v*100)
}

// FrontierAt is the best freed share the curve's points reach at a cost of
// at most max along the axis: what a fixed wait can do there (0 when no
// point is that careful).
func FrontierAt(points []FrontierPoint, axis Axis, max float64) float64 {
	best := 0.0
	for _, p := range points {
		if axis.of(p) <= max && p.Freed > best {
			best = p.Freed
		}
	}
	return best
}

// Frontier draws the fixed waits' curves (tuned and held-apart workloads)
// and the policies as points, the axis's cost along x and freed without
// regret up y, as SVG.
func Frontier(w io.Writer, title string, axis Axis, points []FrontierPoint) error {
	const (
		width, height = 760.0, 480.0
		left, right   = 60.0, 200.0
		top, bottom   = 40.0, 50.0
	)
	maxY := 1.0
	for _, p := range points {
		for maxY < p.Freed {
			maxY += 0.25
		}
	}
	maxX, step := 1.0, 0.2
	if axis == ByColdStarts {
		maxX, step = 1, 1
		for _, p := range points {
			for maxX < p.ColdStarts {
				maxX++
			}
		}
		if maxX > 10 {
			step = math.Ceil(maxX / 10)
			maxX = step * math.Ceil(maxX/step)
		}
	}
	x := func(v float64) float64 { return left + (width-left-right)*v/maxX }
	y := func(v float64) float64 { return top + (height-top-bottom)*(1-v/maxY) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="14">%s</text>`+"\n", left, esc(title))
	// Axes and grid.
	for v := 0.0; v <= maxX+1e-9; v += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#eee"/>`+"\n", x(v), y(0), x(v), y(maxY))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(v), y(0)+16, axis.tick(v))
	}
	for v := 0.0; v <= maxY+0.0001; v += 0.25 {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`+"\n", x(0), y(v), x(maxX), y(v))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n", left-6, y(v)+4, v*100)
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x(0), y(0), x(maxX), y(0))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", x(0), y(0), x(0), y(maxY))
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(maxX/2), height-10, axis.title())
	fmt.Fprintf(&b, `<text transform="translate(16 %.0f) rotate(-90)" text-anchor="middle">freed without regret, of reclaimable</text>`+"\n", y(maxY/2))
	// The curves: fixed waits, in order of regret.
	for _, tuned := range []bool{true, false} {
		var curve []FrontierPoint
		for _, p := range points {
			if p.Curve && p.Tuned == tuned {
				curve = append(curve, p)
			}
		}
		sort.SliceStable(curve, func(i, j int) bool { return axis.of(curve[i]) < axis.of(curve[j]) })
		var path []string
		for _, p := range curve {
			path = append(path, fmt.Sprintf("%.1f,%.1f", x(axis.of(p)), y(p.Freed)))
		}
		stroke, dash := "#333", ""
		if tuned {
			stroke, dash = "#999", ` stroke-dasharray="4 3"`
		}
		if len(path) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s"%s/>`+"\n", strings.Join(path, " "), stroke, dash)
		}
		for _, p := range curve {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>%s</title></circle>`+"\n", x(axis.of(p)), y(p.Freed), stroke, esc(p.Label))
			if !tuned {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555">%s</text>`+"\n", x(axis.of(p))+4, y(p.Freed)-4, esc(p.Label))
			}
		}
	}
	// The policies: filled on the held-apart workloads, hollow on the tuned.
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"}
	seen := map[string]bool{}
	var legend []string
	for _, p := range points {
		if !p.Curve && !seen[p.Label] {
			seen[p.Label] = true
			legend = append(legend, p.Label)
		}
	}
	sort.Strings(legend)
	color := func(label string) string { return colors[sort.SearchStrings(legend, label)%len(colors)] }
	for _, p := range points {
		if p.Curve {
			continue
		}
		fill := color(p.Label)
		if p.Tuned {
			fill = "white"
		}
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="%s" stroke-width="2"><title>%s</title></circle>`+"\n", x(axis.of(p)), y(p.Freed), fill, color(p.Label), esc(p.Label))
	}
	// Legend, right of the plot.
	lx, ly := width-right+16, top+8
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#333"/><text x="%.0f" y="%.0f">fixed waits, held apart</text>`+"\n", lx, ly, lx+20, ly, lx+26, ly+4)
	ly += 18
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="#999" stroke-dasharray="4 3"/><text x="%.0f" y="%.0f">fixed waits, tuned</text>`+"\n", lx, ly, lx+20, ly, lx+26, ly+4)
	for _, l := range legend {
		ly += 18
		fmt.Fprintf(&b, `<circle cx="%.0f" cy="%.0f" r="5" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx+10, ly, color(l), lx+26, ly+4, esc(l))
	}
	ly += 24
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-size="10" fill="#555">filled: held apart; hollow: tuned</text>`+"\n", lx, ly)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
