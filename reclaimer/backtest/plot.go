package backtest

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Plot draws one workload's activity over the history as SVG, with its
// owner's warnings, the reclaims, the time they freed and when its work
// came back.
func Plot(w io.Writer, h History, r *Result, id string) error {
	wi := -1
	for i := range h.Workloads {
		if h.Workloads[i].ID == id {
			wi = i
		}
	}
	if wi < 0 {
		return fmt.Errorf("no workload %q in the history", id)
	}
	wl, res := &h.Workloads[wi], r.Workloads[wi]
	const (
		width, height = 960.0, 300.0
		left, right   = 50.0, 20.0
		top, bottom   = 40.0, 50.0
	)
	steps := max(1, h.Steps()-1)
	x := func(i int) float64 { return left + (width-left-right)*float64(i)/float64(steps) }
	y := func(v float64) float64 { return top + (height-top-bottom)*(1-v) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	f := Figures{}
	f.add(res, h.Step.Minutes())
	fmt.Fprintf(&b, `<text x="%.0f" y="20" font-size="14">%s: reclaimed %d times, regretted %d; %.0f of %.0f idle GPU-minutes freed</text>`+"\n",
		left, esc(id), f.Reclaims, f.Regrets, f.FreedMinutes, f.IdleMinutes)
	// The time each reclaim freed, until the work came back.
	for _, rc := range res.Reclaims {
		end := rc.Returned
		if end < 0 {
			end = steps
		}
		fill := "#cfe8cf"
		if rc.Regret {
			fill = "#f6d5d5"
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s"/>`+"\n", x(rc.At), top, max(1, x(end)-x(rc.At)), height-top-bottom, fill)
	}
	// Axes, hours along the bottom.
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, y(0), width-right, y(0))
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", left, y(0), left, y(1))
	for _, v := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n", left-6, y(v)+4, v*100)
	}
	every := int(math.Max(1, math.Round(float64(steps)*h.Step.Hours()/12)))
	for hr := 0; time.Duration(hr)*time.Hour <= time.Duration(steps)*h.Step; hr += every {
		i := int(time.Duration(hr) * time.Hour / h.Step)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%dh</text>`+"\n", x(i), y(0)+16, hr)
	}
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="gray" stroke-dasharray="4 3"/>`+"\n", left, y(r.IdleThreshold), width-right, y(r.IdleThreshold))
	// The activity the history recorded, broken where it was not sampled.
	var path strings.Builder
	pen := false
	for i, v := range wl.Activity {
		if math.IsNaN(v) {
			pen = false
			continue
		}
		op := "L"
		if !pen {
			op = "M"
		}
		fmt.Fprintf(&path, "%s%.1f %.1f", op, x(i), y(v))
		pen = true
	}
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="#3465a4" stroke-width="1"/>`+"\n", path.String())
	for _, s := range res.Warned {
		fmt.Fprintf(&b, `<path d="M%.1f %.0f l-5 -9 h10 z" fill="#f57900"><title>warned at %s</title></path>`+"\n", x(s), top, stamp(h, s))
	}
	for _, rc := range res.Reclaims {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#cc0000" stroke-width="2"><title>%s at %s</title></line>`+"\n", x(rc.At), top, x(rc.At), y(0), esc(string(rc.Action)), stamp(h, rc.At))
		if rc.Returned >= 0 {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="#3465a4"><title>work back at %s</title></circle>`+"\n", x(rc.Returned), y(0), stamp(h, rc.Returned))
		}
	}
	legend := []struct{ color, text string }{{"#3465a4", "activity"}, {"#f57900", "owner warned"}, {"#cc0000", "reclaimed"}, {"#cfe8cf", "freed"}, {"#f6d5d5", "freed, regretted (work back within " + model.Duration(r.RegretWindow).String() + ")"}}
	lx := left
	for _, l := range legend {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx, height-18, l.color, lx+14, height-9, esc(l.text))
		lx += 24 + 7*float64(len(l.text))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func stamp(h History, i int) string { return h.At(i).UTC().Format("2006-01-02 15:04") }

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
