package packing

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// Risk colours of the plan's picture.
const (
	colourSafe    = "#4c9a2a" // no step over a cap in the replay
	colourCompute = "#e6a23c" // some step over the compute cap
	colourMemory  = "#c0392b" // over the GPU's memory, or a workload over its limit
)

// SVG draws the plan: one row per shared GPU, one box per workload as wide
// as its memory limit, coloured by what the replay saw.
func (p *Plan) SVG(w io.Writer) error {
	const left, top, rowH, width = 70, 40, 26, 640
	capacity := float64(p.Options.Model.MemoryMB << 20)
	height := top + rowH*len(p.GPUs) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", left+width+20, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="13">Shared GPUs of the plan: workloads by memory limit (of %s), coloured by the replay</text>`+"\n", left, gb(capacity))
	byID := map[string]*Advice{}
	for i := range p.Advice {
		byID[p.Advice[i].ID] = &p.Advice[i]
	}
	for r, g := range p.GPUs {
		y := top + r*rowH
		fmt.Fprintf(&b, `<text x="4" y="%d">GPU %d %s</text>`+"\n", y+15, g.Index, g.Sharing)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", left, y, width, rowH-4)
		over := map[string]bool{}
		for _, id := range g.Replay.OverLimit {
			over[id] = true
		}
		x := float64(left)
		for _, id := range g.Workloads {
			a := byID[id]
			wd := a.Fit.MemoryLimitBytes / capacity * width
			colour := colourSafe
			switch {
			case over[id] || g.Replay.OverMemory > 0:
				colour = colourMemory
			case g.Replay.OverCompute > 0:
				colour = colourCompute
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="#fff"><title>%s: limit %s, p95 activity %s</title></rect>`+"\n",
				x, y, wd, rowH-4, colour, html.EscapeString(id), gb(a.Fit.MemoryLimitBytes), pct(a.Activity.P95))
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#fff">%s</text>`+"\n", x+3, y+15, html.EscapeString(shortIDs([]string{id})[0][:min(8, len(id))]))
			x += wd
		}
	}
	y := top + rowH*len(p.GPUs) + 20
	for i, l := range []struct{ c, t string }{{colourSafe, "no step over a cap"}, {colourCompute, "over the compute cap at some step"}, {colourMemory, "over memory, or over its own limit"}} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", left+i*210, y-9, l.c, left+i*210+14, y, l.t)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
