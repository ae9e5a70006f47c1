package backtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"
)

// Figures are the totals of a set of workloads. Minutes are GPU-minutes
// (a workload holds one unit; a step is converted to minutes).
type Figures struct {
	Name         string  `json:"name"`
	Workloads    int     `json:"workloads"`
	HeldMinutes  float64 `json:"held_gpu_minutes"`
	IdleMinutes  float64 `json:"idle_gpu_minutes"`
	FreedMinutes float64 `json:"freed_gpu_minutes"`
	// ReclaimableMinutes bound what any policy frees without regret.
	ReclaimableMinutes float64 `json:"reclaimable_gpu_minutes"`
	// RegretFreeMinutes were freed by the reclaims not regretted.
	RegretFreeMinutes float64        `json:"freed_without_regret_gpu_minutes"`
	Warnings          int            `json:"warnings"`
	Reclaims          int            `json:"reclaims"`
	ByAction          map[string]int `json:"reclaims_by_action"`
	Regrets           int            `json:"regrets"`
	// RegretsRestored were restored by restore_when when their work came
	// back; RestoreWaitMinutes sums the time their work waited for it.
	// The others wait for a person.
	RegretsRestored    int     `json:"regrets_restored_on_demand"`
	RestoreWaitMinutes float64 `json:"restore_wait_minutes"`
	// ColdStarts counts the restores on demand, regretted or not: each
	// time returning work found its workload stopped and waited for it to
	// start again. OwnerWaitMinutes sums those waits: the restore's own
	// delay and the workload's cold start. WorkloadDays is the workloads'
	// time in the history.
	ColdStarts       int     `json:"cold_starts"`
	OwnerWaitMinutes float64 `json:"owner_wait_minutes"`
	WorkloadDays     float64 `json:"workload_days"`
	// Bound, when asked (SetBounds), is the most a policy that knows the
	// future frees without regret on these workloads at Bound.Delay and
	// the same cold starts per workload-day: the policy's figure beside
	// what any policy could do.
	Bound *Bound `json:"bound,omitempty"`
}

// ShareOfBound is the freed-without-regret minutes as a share of the
// bound's; 0 without one.
func (f Figures) ShareOfBound() float64 {
	if f.Bound == nil || f.Bound.Freed == 0 || f.ReclaimableMinutes == 0 {
		return 0
	}
	return f.RegretFreeMinutes / f.ReclaimableMinutes / f.Bound.Freed
}

// Split is a set of workloads a report totals: all, or the tuned or the
// held-apart ones.
type Split struct {
	Name string
	Keep func(id string) bool
}

// Splits are all the workloads and, when a share is held apart, the
// tuned and the held-apart ones, in that order.
func Splits(heldApart float64) []Split {
	out := []Split{{"all", func(string) bool { return true }}}
	if heldApart > 0 {
		out = append(out, Split{"tuned", func(id string) bool { return !IsHeldApart(id, heldApart) }},
			Split{"held apart", func(id string) bool { return IsHeldApart(id, heldApart) }})
	}
	return out
}

// SetBounds gives the report's totals (all, tuned, held apart) their
// bound at delay and at the cold starts each spent, as Bounds counts.
func (rep *Report) SetBounds(h History, threshold float64, regret, delay time.Duration, heldApart float64) {
	totals := append([]*Figures{&rep.Total}, rep.Tuned, rep.HeldApart)
	for i, s := range Splits(heldApart) {
		if f := totals[i]; f != nil {
			b := Bounds(h, threshold, regret, []time.Duration{delay}, []float64{f.ColdStartsPerWorkloadDay()}, s.Keep)[0]
			f.Bound = &b
		}
	}
}

// ColdStartsPerWorkloadDay is how often, on average, a workload's returning
// work waited for a cold start in a day.
func (f Figures) ColdStartsPerWorkloadDay() float64 {
	if f.WorkloadDays == 0 {
		return 0
	}
	return float64(f.ColdStarts) / f.WorkloadDays
}

// Recovered is the share of the idle-held GPU-minutes the policy freed.
func (f Figures) Recovered() float64 {
	if f.IdleMinutes == 0 {
		return 0
	}
	return f.FreedMinutes / f.IdleMinutes
}

// RegretShare is the share of the reclaims after which work came back in time.
func (f Figures) RegretShare() float64 {
	if f.Reclaims == 0 {
		return 0
	}
	return float64(f.Regrets) / float64(f.Reclaims)
}

func (f *Figures) add(w WorkloadResult, minutes float64) {
	f.Workloads++
	f.HeldMinutes += float64(w.Held) * minutes
	f.IdleMinutes += float64(w.Idle) * minutes
	f.FreedMinutes += float64(w.Freed) * minutes
	f.ReclaimableMinutes += float64(w.Reclaimable) * minutes
	f.WorkloadDays += float64(w.Span) * minutes / (24 * 60)
	f.Warnings += len(w.Warned)
	if f.ByAction == nil {
		f.ByAction = map[string]int{}
	}
	for _, r := range w.Reclaims {
		f.Reclaims++
		f.ByAction[string(r.Action)]++
		if r.Restored >= 0 && r.Returned >= 0 {
			f.ColdStarts++
			f.OwnerWaitMinutes += float64(r.Restored-r.Returned)*minutes + w.ColdStart.Minutes()
		}
		if r.Regret {
			f.Regrets++
			if r.Restored >= 0 {
				f.RegretsRestored++
				f.RestoreWaitMinutes += float64(r.Restored-r.Returned) * minutes
			}
		} else {
			f.RegretFreeMinutes += float64(r.Freed) * minutes
		}
	}
}

// Report is a result's figures: in all, per owner and per workload.
type Report struct {
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	RegretWindow  string    `json:"regret_window"`
	IdleThreshold float64   `json:"idle_threshold"`
	Total         Figures   `json:"total"`
	// Tuned and HeldApart split the workloads when a share is held apart
	// (see HeldApart): a default chosen on the tuned ones is reported on
	// the others.
	Tuned     *Figures       `json:"tuned,omitempty"`
	HeldApart *Figures       `json:"held_apart,omitempty"`
	Owners    []Figures      `json:"owners"`
	Workloads []Figures      `json:"workloads"`
	States    map[string]int `json:"reclaims_by_state"`
}

// IsHeldApart says whether a workload falls in the held-apart share of a
// history: the FNV-1a hash of its ID, as a fraction of 2³², is under the
// share. The split depends on nothing but the ID, so every variant, and
// every run, holds apart the same workloads.
func IsHeldApart(id string, share float64) bool {
	h := fnv.New32a()
	h.Write([]byte(id))
	return float64(h.Sum32())/(1<<32) < share
}

// Summarize totals a result; heldApart, when positive, is the share of the
// workloads reported apart from those a policy is tuned on.
func Summarize(r *Result, heldApart float64) Report {
	minutes := r.Step.Minutes()
	rep := Report{Start: r.Start, End: r.Start.Add(time.Duration(r.Steps) * r.Step), RegretWindow: model.Duration(r.RegretWindow).String(),
		IdleThreshold: r.IdleThreshold, Total: Figures{Name: "all"}, States: r.States}
	owners := map[string]*Figures{}
	for _, w := range r.Workloads {
		rep.Total.add(w, minutes)
		o := owners[w.Owner]
		if o == nil {
			o = &Figures{Name: w.Owner}
			owners[w.Owner] = o
		}
		o.add(w, minutes)
		if heldApart > 0 {
			if rep.Tuned == nil {
				rep.Tuned, rep.HeldApart = &Figures{Name: "tuned"}, &Figures{Name: "held apart"}
			}
			if IsHeldApart(w.ID, heldApart) {
				rep.HeldApart.add(w, minutes)
			} else {
				rep.Tuned.add(w, minutes)
			}
		}
		f := Figures{Name: w.ID}
		f.add(w, minutes)
		rep.Workloads = append(rep.Workloads, f)
	}
	for _, o := range owners {
		rep.Owners = append(rep.Owners, *o)
	}
	// Most idle first: where the waste is.
	byIdle := func(fs []Figures) {
		sort.Slice(fs, func(i, j int) bool {
			if fs[i].IdleMinutes != fs[j].IdleMinutes {
				return fs[i].IdleMinutes > fs[j].IdleMinutes
			}
			return fs[i].Name < fs[j].Name
		})
	}
	byIdle(rep.Owners)
	byIdle(rep.Workloads)
	return rep
}

// split is the tuned and held-apart figures, when the workloads were split.
func (rep Report) split() []Figures {
	if rep.Tuned == nil {
		return nil
	}
	return []Figures{*rep.Tuned, *rep.HeldApart}
}

// JSON writes the report as JSON.
func (rep Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func actions(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// columns are the report's header and its row of a total: the bound's
// column only when the report has one.
func (rep Report) columns() ([]string, func(Figures) []string) {
	n := len(columns)
	if rep.Total.Bound == nil {
		n--
	}
	return columns[:n], func(f Figures) []string { return figureRow(f)[:n] }
}

var columns = []string{"", "workloads", "held GPU-min", "idle GPU-min", "reclaimable", "freed GPU-min", "recovered", "freed w/o regret", "warnings", "reclaims", "regret", "restored on demand", "cold starts", "by action", "bound: freed w/o regret"}

func figureRow(f Figures) []string {
	return []string{f.Name, fmt.Sprint(f.Workloads), fmt.Sprintf("%.0f", f.HeldMinutes), fmt.Sprintf("%.0f", f.IdleMinutes),
		fmt.Sprintf("%.0f", f.ReclaimableMinutes), fmt.Sprintf("%.0f", f.FreedMinutes), pct(f.Recovered()),
		fmt.Sprintf("%.0f", f.RegretFreeMinutes), fmt.Sprint(f.Warnings), fmt.Sprint(f.Reclaims),
		fmt.Sprintf("%d (%s)", f.Regrets, pct(f.RegretShare())), restored(f), coldStarts(f), actions(f.ByAction), bound(f)}
}

// bound says what a policy that knows the future frees at the same delay
// and cold starts, and the share of it this policy freed.
func bound(f Figures) string {
	if f.Bound == nil {
		return "-"
	}
	return fmt.Sprintf("%s at %s (%s of it)", pct(f.Bound.Freed), model.Duration(f.Bound.Delay), pct(f.ShareOfBound()))
}

// restored says how many regrets restore_when brought back, and how long
// their work waited on average.
func restored(f Figures) string {
	if f.RegretsRestored == 0 {
		return "-"
	}
	return fmt.Sprintf("%d, waited %.1f min", f.RegretsRestored, f.RestoreWaitMinutes/float64(f.RegretsRestored))
}

// coldStarts says how many times returning work waited for its workload to
// start again, per workload-day, and how long it waited on average.
func coldStarts(f Figures) string {
	if f.ColdStarts == 0 {
		return "-"
	}
	return fmt.Sprintf("%d (%.2f/workload-day), waited %.1f min", f.ColdStarts, f.ColdStartsPerWorkloadDay(), f.OwnerWaitMinutes/float64(f.ColdStarts))
}

// Text writes the report as aligned columns; top bounds the owners and
// workloads listed (0: all).
func (rep Report) Text(w io.Writer, top int) error {
	header, row := rep.columns()
	fmt.Fprintf(w, "%s to %s; idle: activity at or under %g; regret: work back within %s of a reclaim\n\n",
		rep.Start.UTC().Format(time.RFC3339), rep.End.UTC().Format(time.RFC3339), rep.IdleThreshold, rep.RegretWindow)
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	// Every line has every cell, so that one table's columns line up.
	line := func(cells ...string) {
		full := make([]string, len(header))
		copy(full, cells)
		fmt.Fprintln(tw, strings.Join(full, "\t"))
	}
	line(header...)
	line(row(rep.Total)...)
	for _, f := range rep.split() {
		line(row(f)...)
	}
	for _, section := range []struct {
		name string
		fs   []Figures
	}{{"owners", rep.Owners}, {"workloads", rep.Workloads}} {
		line()
		line(section.name + ":")
		for i, f := range section.fs {
			if top > 0 && i == top {
				line(fmt.Sprintf("(%d more)", len(section.fs)-top))
				break
			}
			line(row(f)...)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if _, err := io.WriteString(w, strings.TrimRight(l, " \n")+strings.Repeat("\n", strings.Count(l, "\n"))); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nreclaims by state: %s\n", actions(rep.States))
	return nil
}

// Markdown writes the totals and the owners as a Markdown table.
func (rep Report) Markdown(w io.Writer, top int) error {
	header, row := rep.columns()
	cells := func(c []string) { fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | ")) }
	cells(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	cells(sep)
	total := row(rep.Total)
	total[0] = "**all**"
	cells(total)
	for _, f := range rep.split() {
		cells(row(f))
	}
	for i, f := range rep.Owners {
		if top > 0 && i == top {
			break
		}
		if len(rep.Owners) > 1 {
			cells(row(f))
		}
	}
	return nil
}
