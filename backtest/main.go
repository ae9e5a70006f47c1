// Command gpureclaim-backtest replays recorded GPU activity (a trace, or a
// Prometheus range-query export of the exporter's metrics) through the rule
// files and the reclaimer's policy on a simulated clock, and reports what the
// policy would have done. It is its own binary so that the reclaimer links no
// rule evaluator: Prometheus's rule manager brings its service discovery.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpureclaim/gpureclaim/internal/cli"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/trace"
	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/rules"
)

type backtestOptions struct {
	trace, prometheus, controller string
	rules                         cli.StringList
	configFile                    string
	regret                        time.Duration
	heldApart                     float64
	threshold                     float64
	format                        string
	top                           int
	plotWorkload, plotFile        string
	printVersion                  bool
	dcgmHonorLabels               bool
	restoreOnDemand               bool
	coldStart                     time.Duration
	bounds                        bool
	boundDelays                   []time.Duration
	boundColdStarts               []float64
	boundDelay                    time.Duration
	ceilingConfig, ceilingClass   string
	ceilingWindows                []time.Duration
	ceilingAfters                 []time.Duration
	ceilingReclaimAfters          []time.Duration
}

func parseBacktestFlags(args []string, stderr io.Writer) (*backtestOptions, error) {
	o := &backtestOptions{}
	fs := flag.NewFlagSet("gpureclaim-backtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gpureclaim-backtest --rules=FILE [--config.file=FILE] (--history.trace=FILE | --history.prometheus=FILE) [flags]")
		fmt.Fprintln(stderr, "\nReplays recorded GPU activity through the rules and the reclaimer's policy on a simulated clock and reports what the policy would have done.")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.trace, "history.trace", "", "A trace CSV (timestamp, pod, gpu_duty_cycle_percent, gpu_memory_used_bytes; gzipped or not), one row per pod and minute.")
	fs.StringVar(&o.prometheus, "history.prometheus", "", "A Prometheus range-query export (the JSON of /api/v1/query_range) of the exporter's unit metrics, or of dcgm-exporter's fields (replay those with rules for source: dcgm).")
	fs.BoolVar(&o.dcgmHonorLabels, "history.dcgm-honor-labels", false, "The dcgm-exporter export was scraped with honor_labels: its pod labels are pod, namespace, container rather than exported_*.")
	fs.StringVar(&o.controller, "history.controller", "", "What runs the history's pods, which a trace or an export does not say: a workload kind the config knows (Deployment, StatefulSet or another that scales, replayed with one replica; Job, Notebook, RayJob or another that stops), or empty (bare pods).")
	fs.DurationVar(&o.coldStart, "history.cold-start", 0, "How long a restored workload takes to serve again, which its returning work waits for (default: its kind's, e.g. 3m for a Deployment, 1m for a Notebook, 5m for a Job; backtest.DefaultColdStarts).")
	fs.BoolVar(&o.restoreOnDemand, "history.restore-on-demand", false, "Give every policy that scales down or stops a restore_when that answers when the workload's recorded work comes back (a demand series that rises with its work): a regretted reclaim is restored then, and the report counts it.")
	fs.Var(&o.rules, "rules", "A Prometheus rule file, as Prometheus loads it (repeatable).")
	fs.StringVar(&o.configFile, "config.file", "", "The reclaimer's configuration, read without its secret files; empty for the defaults. Dry run is ignored.")
	fs.DurationVar(&o.regret, "regret.window", 30*time.Minute, "A reclaim after which the workload's activity came back within this window is counted as regret.")
	fs.Float64Var(&o.threshold, "idle.threshold", names.IdleThreshold, "Activity at or under which a held minute is idle, and above which work came back.")
	fs.Float64Var(&o.heldApart, "report.held-apart", 0, "Report this share of the workloads apart from the others (0: no split): tune a policy on the others and judge it on these. A workload is held apart by the FNV-1a hash of its ID, the same in every run.")
	fs.StringVar(&o.format, "format", "text", "Report format: text, markdown or json.")
	fs.IntVar(&o.top, "top", 20, "Owners and workloads listed, most idle first (0: all).")
	fs.StringVar(&o.plotWorkload, "plot.workload", "", "Plot this workload's activity with the warnings and reclaims (SVG).")
	fs.StringVar(&o.plotFile, "plot.file", "backtest.svg", "Where the plot goes.")
	fs.BoolVar(&o.bounds, "report.bounds", false, "Print, instead of replaying rules, the most any policy could free at a cost in cold starts: one that knows how long every pause lasts, acts --bound.delays into the pauses it picks, and picks within --bound.cold-starts per workload-day. If a target is above it, no policy reaches it.")
	fs.DurationVar(&o.boundDelay, "report.bound-delay", 0, "Also give each total the bound (see --report.bounds) at this delay and at the cold starts per workload-day the replay spent, and the share of it the policy freed; 0 leaves it out.")
	delays := fs.String("bound.delays", "0s,15m,30m,60m", "With --report.bounds: how long a pause lasts before the policy acts (the idle alert's wait and the grace), comma-separated.")
	budgets := fs.String("bound.cold-starts", "0.5,1,2,5", "With --report.bounds: cold starts per workload-day the policy may spend, comma-separated.")
	fs.StringVar(&o.ceilingConfig, "ceiling.config", "", "With --report.bounds: also print quiet's ceiling, the most the quiet of this rules config's --ceiling.class frees within --bound.cold-starts when its unit_busy_below is chosen on the very workloads it is judged on (the grace: that of the reclaimer's policy for the class's GPUIdle).")
	fs.StringVar(&o.ceilingClass, "ceiling.class", rules.DefaultClass, "With --ceiling.config: the idle class whose quiet the ceiling replays ("+rules.DefaultClass+": the idle section's own).")
	windows := fs.String("ceiling.unit-windows", "", "With --ceiling.config: the unit windows the ceiling tries, comma-separated (default: the class's unit_window).")
	afters := fs.String("ceiling.afters", "", "With --ceiling.config: how far into a pause on a quiet unit the idle alert fires (quiet's after), comma-separated; the ceiling is printed for each (default: the class's).")
	reclaimAfters := fs.String("ceiling.reclaim-afters", "", "With --ceiling.config: how far into a pause on any other unit the idle alert fires (the class's reclaim_after), comma-separated; the ceiling is printed for each (default: the class's).")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.boundDelays, err = durationList("bound.delays", *delays, "a duration of 0 or more", func(d time.Duration) bool { return d >= 0 }); err != nil {
		return nil, err
	}
	for _, b := range strings.Split(*budgets, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(b), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--bound.cold-starts: %q is not a number of 0 or more", b)
		}
		o.boundColdStarts = append(o.boundColdStarts, v)
	}
	for _, l := range []struct {
		flag, list string
		to         *[]time.Duration
	}{{"ceiling.unit-windows", *windows, &o.ceilingWindows}, {"ceiling.afters", *afters, &o.ceilingAfters}, {"ceiling.reclaim-afters", *reclaimAfters, &o.ceilingReclaimAfters}} {
		if l.list == "" {
			continue
		}
		if *l.to, err = durationList(l.flag, l.list, "a positive duration", func(d time.Duration) bool { return d > 0 }); err != nil {
			return nil, err
		}
	}
	switch {
	case o.printVersion:
		return o, nil
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	case (o.trace == "") == (o.prometheus == ""):
		return nil, errors.New("give one history: --history.trace or --history.prometheus")
	case len(o.rules) == 0 && !o.bounds:
		return nil, errors.New("--rules: give the rule files (e.g. rules/gpureclaim.rules.yml)")
	case o.regret <= 0:
		return nil, errors.New("--regret.window: must be positive")
	case o.coldStart < 0:
		return nil, errors.New("--history.cold-start: must not be negative")
	case o.threshold <= 0 || o.threshold >= 1:
		return nil, fmt.Errorf("--idle.threshold: %g must be between 0 and 1", o.threshold)
	case o.heldApart < 0 || o.heldApart >= 1:
		return nil, fmt.Errorf("--report.held-apart: %g must be at least 0 and under 1", o.heldApart)
	case o.ceilingConfig != "" && !o.bounds:
		return nil, errors.New("--ceiling.config: give it with --report.bounds")
	case o.format != "text" && o.format != "markdown" && o.format != "json":
		return nil, fmt.Errorf("--format: %q is not text, markdown or json", o.format)
	}
	return o, nil
}

// durationList parses a flag's comma-separated durations, each of which
// ok must accept; want says what ok asks.
func durationList(flag, list, want string, ok func(time.Duration) bool) ([]time.Duration, error) {
	var out []time.Duration
	for _, d := range strings.Split(list, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || !ok(v) {
			return nil, fmt.Errorf("--%s: %q is not %s", flag, d, want)
		}
		out = append(out, v)
	}
	return out, nil
}

// tool is the command: flags, --version, the work.
var tool = cli.Tool[*backtestOptions]{Name: "gpureclaim-backtest", Parse: parseBacktestFlags, Version: func(o *backtestOptions) bool { return o.printVersion }, Do: runBacktest}

func main() { tool.Main() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return tool.Run(ctx, args, stdout, stderr)
}

func runBacktest(ctx context.Context, o *backtestOptions, stdout io.Writer) error {
	cfg, err := config.DefaultWithoutSecrets()
	if o.configFile != "" {
		cfg, err = config.LoadWithoutSecrets(o.configFile)
	}
	if err != nil {
		return err
	}
	topOwner, err := replayedController(cfg, o.controller)
	if err != nil {
		return err
	}
	var h backtest.History
	if o.trace != "" {
		tr, err := trace.Load(o.trace)
		if err != nil {
			return fmt.Errorf("--history.trace: %w", err)
		}
		h = backtest.FromTrace(tr, topOwner)
	} else {
		f, err := os.Open(o.prometheus)
		if err != nil {
			return fmt.Errorf("--history.prometheus: %w", err)
		}
		h, err = backtest.FromPrometheus(f, topOwner, o.dcgmHonorLabels)
		f.Close()
		if err != nil {
			return fmt.Errorf("--history.prometheus: %s: %w", o.prometheus, err)
		}
	}
	if o.bounds {
		if err := printBounds(stdout, h, o); err != nil || o.ceilingConfig == "" {
			return err
		}
		q, err := ceilingQuiet(o, cfg)
		if err != nil {
			return err
		}
		return printCeilings(stdout, h, o, q)
	}
	dir, err := os.MkdirTemp("", "gpureclaim-backtest")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var coldStarts map[string]time.Duration
	if o.coldStart > 0 {
		coldStarts = map[string]time.Duration{topOwner.Kind: o.coldStart}
	}
	res, err := backtest.Run(ctx, h, backtest.Options{RuleFiles: o.rules, Config: cfg, Dir: dir, RegretWindow: o.regret, IdleThreshold: o.threshold,
		RestoreOnDemand: o.restoreOnDemand, ColdStarts: coldStarts})
	if err != nil {
		return err
	}
	rep := backtest.Summarize(res, o.heldApart)
	if o.boundDelay > 0 {
		rep.SetBounds(h, res.IdleThreshold, res.RegretWindow, o.boundDelay, o.heldApart)
	}
	switch o.format {
	case "json":
		err = rep.JSON(stdout)
	case "markdown":
		err = rep.Markdown(stdout, o.top)
	default:
		err = rep.Text(stdout, o.top)
	}
	if err != nil || o.plotWorkload == "" {
		return err
	}
	f, err := os.Create(o.plotFile)
	if err != nil {
		return err
	}
	if err := backtest.Plot(f, h, res, o.plotWorkload); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printBounds prints backtest.Bounds for every workload, and for the tuned
// and held-apart ones when a share is held apart.
func printBounds(w io.Writer, h backtest.History, o *backtestOptions) error {
	splits := backtest.Splits(o.heldApart)
	cols := make([][]backtest.Bound, len(splits))
	fmt.Fprint(w, "| acts after | cold starts per workload-day |")
	for i, s := range splits {
		cols[i] = backtest.Bounds(h, o.threshold, o.regret, o.boundDelays, o.boundColdStarts, s.Keep)
		fmt.Fprintf(w, " freed, %s |", s.Name)
	}
	fmt.Fprint(w, "\n| --- | --- |"+strings.Repeat(" --- |", len(splits))+"\n")
	for row, b := range cols[0] {
		fmt.Fprintf(w, "| %s | %g |", model.Duration(b.Delay), b.ColdStartsPerWorkloadDay)
		for i := range splits {
			fmt.Fprintf(w, " %.0f%% |", 100*cols[i][row].Freed)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// ceilingQuiet is the quiet of --ceiling.class in --ceiling.config.
// The grace is that of the reclaimer's first policy for the class's idle
// alert.
func ceilingQuiet(o *backtestOptions, cfg *config.Config) (backtest.Quiet, error) {
	c, err := rules.Load(o.ceilingConfig)
	if err != nil {
		return backtest.Quiet{}, fmt.Errorf("--ceiling.config: %w", err)
	}
	alert := model.LabelSet{model.AlertNameLabel: names.AlertIdle, names.LabelClass: model.LabelValue(o.ceilingClass)}
	i := slices.IndexFunc(cfg.Policies, func(p config.Policy) bool { return p.Matches(alert) })
	if i < 0 {
		return backtest.Quiet{}, fmt.Errorf("--ceiling.class: no policy of the reclaimer's config acts on %s", alert)
	}
	quiets := c.Quiets()
	k, ok := quiets[o.ceilingClass]
	if !ok {
		return backtest.Quiet{}, fmt.Errorf("--ceiling.class: %s has no quiet in %s (classes with one: %s)", o.ceilingClass, o.ceilingConfig, strings.Join(slices.Sorted(maps.Keys(quiets)), ", "))
	}
	return backtest.Quiet{After: time.Duration(k.Quiet.After), ReclaimAfter: time.Duration(k.ReclaimAfter), Grace: cfg.Policies[i].GraceTime(),
		UnitWindow: time.Duration(k.Quiet.UnitWindow), Lookback: time.Duration(c.Idle.Lookback)}, nil
}

// printCeilings prints backtest.Ceilings per unit window and budget, as
// printBounds prints the bounds, a table for each of the alert's waits
// tried.
func printCeilings(w io.Writer, h backtest.History, o *backtestOptions, q backtest.Quiet) error {
	orClass := func(tried []time.Duration, class time.Duration) []time.Duration {
		if len(tried) == 0 {
			return []time.Duration{class}
		}
		return tried
	}
	windows := orClass(o.ceilingWindows, q.UnitWindow)
	splits := backtest.Splits(o.heldApart)
	for _, q.After = range orClass(o.ceilingAfters, q.After) {
		for _, q.ReclaimAfter = range orClass(o.ceilingReclaimAfters, q.ReclaimAfter) {
			fmt.Fprintf(w, "\nquiet's ceiling: fires %s or %s into a pause, acts %s later\n\n", model.Duration(q.After), model.Duration(q.ReclaimAfter), model.Duration(q.Grace))
			fmt.Fprint(w, "| unit window | cold starts per workload-day |")
			for _, s := range splits {
				fmt.Fprintf(w, " freed, %s (unit_busy_below, spent) |", s.Name)
			}
			fmt.Fprint(w, "\n| --- | --- |"+strings.Repeat(" --- |", len(splits))+"\n")
			for _, q.UnitWindow = range windows {
				cols := make([][]backtest.Ceiling, len(splits))
				for i, s := range splits {
					cols[i] = backtest.Ceilings(h, o.threshold, o.regret, q, o.boundColdStarts, s.Keep)
				}
				for row, c := range cols[0] {
					fmt.Fprintf(w, "| %s | %g |", model.Duration(q.UnitWindow), c.ColdStartsPerWorkloadDay)
					for i := range splits {
						c := cols[i][row]
						fmt.Fprintf(w, " %.1f%% (%.3g, %.2f) |", 100*c.Freed, c.UnitBusyBelow, c.Spent)
					}
					fmt.Fprintln(w)
				}
			}
		}
	}
	return nil
}

// replayedController is what runs each replayed pod: a kind the config
// knows, stopped as the reclaimer would stop it, or nothing (bare pods).
func replayedController(cfg *config.Config, kind string) (reclaim.TopOwner, error) {
	if kind == "" {
		return reclaim.TopOwner{}, nil
	}
	var kinds []string
	for _, w := range cfg.Workloads {
		if w.Disabled {
			continue
		}
		kinds = append(kinds, w.Kind)
		if w.Kind != kind {
			continue
		}
		topOwner := reclaim.TopOwner{APIVersion: w.Group + "/" + w.Version, Kind: w.Kind, Namespace: "replay", Name: "replayed", Stop: reclaim.StopPatch, Stopped: w.Stopped}
		if w.Scale {
			topOwner.Stop, topOwner.Replicas, topOwner.Stopped = reclaim.StopScale, 1, "scaled down"
		}
		return topOwner, nil
	}
	return reclaim.TopOwner{}, fmt.Errorf("--history.controller: %q is not a workload kind the config knows (%s) or empty", kind, strings.Join(kinds, ", "))
}
