package packing

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// Text writes the plan for a terminal.
func (p *Plan) Text(w io.Writer) error { return p.write(w, false) }

// Markdown writes the plan as Markdown.
func (p *Plan) Markdown(w io.Writer) error { return p.write(w, true) }

// JSON writes the plan as JSON.
func (p *Plan) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

func pct(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }

func (p *Plan) write(w io.Writer, md bool) error {
	o, s := p.Options, p.Summary
	plannedOn := p.Options.Step * timeSteps(p.PlanSteps)
	replayed := p.Options.Step * timeSteps(p.Steps-p.PlanSteps)
	var b strings.Builder
	head := func(t string) {
		if md {
			fmt.Fprintf(&b, "\n## %s\n\n", t)
		} else {
			fmt.Fprintf(&b, "\n%s\n%s\n", t, strings.Repeat("-", len(t)))
		}
	}
	if md {
		b.WriteString("# Packing plan\n\n")
	}
	fmt.Fprintf(&b, "Planned on %s from %s, replayed on the %s after it. GPU: %s; compute cap %s (passed at most %s of the planning steps), memory cap %s, headroom %s on each workload's memory.\n",
		plannedOn, p.Start.UTC().Format("2006-01-02 15:04 UTC"), replayed, o.Model.Name, pct(o.ComputeCap), pct(o.ComputeSlack), pct(o.MemoryCap), pct(o.Headroom))
	head("On the replayed steps")
	rows := [][2]string{
		{"workloads", fmt.Sprint(s.Workloads)},
		{"packed onto shared GPUs", fmt.Sprintf("%d on %d GPUs", s.Packed, len(p.GPUs))},
		{"GPUs held before → after", fmt.Sprintf("%d → %d", s.GPUsBefore, s.GPUsAfter)},
		{"GPUs freed", pct(s.FreedShare)},
		{"GPU-minutes overloaded by sharing (over the compute cap, no workload alone over it)", pct(s.OverloadedShare)},
		{"GPU-minutes over the compute cap", pct(s.OverComputeShare)},
		{"GPU-minutes over memory", pct(s.OverMemoryShare)},
		{"packed workloads over their own memory limit", fmt.Sprint(s.OverTheirLimit)},
		{"effective utilization before → after", fmt.Sprintf("%s → %s", pct(s.EffectiveUtilBefore), pct(s.EffectiveUtilAfter))},
	}
	if ex := p.Exact; ex != nil {
		v := fmt.Sprintf("%d GPUs for the packable workloads (first fit: %d; no plan takes fewer than %d), proven optimal", ex.GPUs, ex.FirstFit, ex.LowerBound)
		if !ex.Proven {
			v = fmt.Sprintf("%d GPUs for the packable workloads (first fit: %d; no plan takes fewer than %d), not proven within the search's limits", ex.GPUs, ex.FirstFit, ex.LowerBound)
		}
		rows = append(rows, [2]string{"exact search, on the planning steps", v})
	}
	if bd := p.Bound; bd != nil {
		rows = append(rows, [2]string{"bound: fewest GPUs any plan within the caps holds", fmt.Sprintf("%d (at most %s freed; %d workloads share with none, %d triples fit, each holding one of %d)", bd.GPUsAfter, pct(bd.FreedShare), bd.Alone, bd.Triples, bd.Cover)})
	}
	if o.CostPerGPUHour > 0 {
		rows = append(rows, [2]string{"cost saved", fmt.Sprintf("%.0f %s over %.1f hours", s.CostSaved, s.Currency, s.Hours)})
	}
	table(&b, md, []string{"figure", "value"}, func(add func(...string)) {
		for _, r := range rows {
			add(r[0], r[1])
		}
	})
	head("Shared GPUs")
	table(&b, md, []string{"GPU", "sharing", "workloads", "memory limits", "planned peak activity", "worst replayed minute", "steps over compute / memory", "over their limit"}, func(add func(...string)) {
		for _, g := range p.GPUs {
			add(fmt.Sprint(g.Index), g.Sharing, strings.Join(shortIDs(g.Workloads), " "), gb(g.MemoryLimitBytes), pct(g.PeakActivity),
				fmt.Sprintf("%s, %s", pct(g.Replay.WorstActivity), gb(g.Replay.WorstMemoryBytes)),
				fmt.Sprintf("%d / %d", g.Replay.OverCompute, g.Replay.OverMemory), strings.Join(shortIDs(g.Replay.OverLimit), " "))
		}
	})
	head("Workloads")
	advice := append([]Advice(nil), p.Advice...)
	sort.SliceStable(advice, func(i, j int) bool { return advice[i].Owner+advice[i].ID < advice[j].Owner+advice[j].ID })
	table(&b, md, []string{"owner", "workload", "activity p50/p95/p99/max", "memory p50/p95/max, trend/day", "fit", "why", "change"}, func(add func(...string)) {
		for _, a := range advice {
			add(a.Owner, a.ID, fmt.Sprintf("%s/%s/%s/%s", pct(a.Activity.P50), pct(a.Activity.P95), pct(a.Activity.P99), pct(a.Activity.Max)),
				fmt.Sprintf("%s/%s/%s, %+.1f GB", gb(a.Memory.P50), gb(a.Memory.P95), gb(a.Memory.Max), a.Memory.TrendPerDay/1e9),
				fitText(a), a.Fit.Why, a.Change)
		}
	})
	_, err := io.WriteString(w, b.String())
	return err
}

func fitText(a Advice) string {
	switch {
	case a.GPU >= 0:
		return fmt.Sprintf("packed on GPU %d", a.GPU)
	case a.Fit.Kind == FitPackable:
		return "packable, no partner"
	case a.Fit.Profile != "" && a.Fit.Kind != FitWhole:
		return "MIG " + a.Fit.Profile
	}
	return a.Fit.Kind
}

func shortIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id
		if len(id) > 12 {
			out[i] = id[:12]
		}
	}
	return out
}

func table(b *strings.Builder, md bool, header []string, rows func(add func(...string))) {
	if md {
		fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat(" --- |", len(header)))
		rows(func(cells ...string) {
			for i := range cells {
				cells[i] = strings.ReplaceAll(cells[i], "|", "\\|")
			}
			fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
		})
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	rows(func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) })
	tw.Flush()
}
