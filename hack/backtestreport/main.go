// Command backtestreport turns gpureclaim-backtest's JSON reports into what
// docs/backtest shows: a report's Markdown rows (all, tuned, held apart),
// and the frontier plot of fixed waits with the policies as points.
// `make backtest` (hack/backtest.sh) runs it.
//
//	backtestreport markdown REPORT.json
//	backtestreport frontier -o FILE.svg [-regret 0.2 | -cold-starts 1] wait:LABEL=REPORT.json... policy:LABEL=REPORT.json...
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "backtestreport:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("give a command: markdown or frontier")
	}
	switch args[0] {
	case "markdown":
		if len(args) != 2 {
			return errors.New("markdown: give one report")
		}
		rep, err := load(args[1])
		if err != nil {
			return err
		}
		return rep.Markdown(os.Stdout, 0)
	case "frontier":
		return frontier(args[1:])
	}
	return fmt.Errorf("%q is not markdown or frontier", args[0])
}

func load(path string) (backtest.Report, error) {
	var rep backtest.Report
	b, err := os.ReadFile(path)
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return rep, fmt.Errorf("%s: %w", path, err)
	}
	if rep.Tuned == nil || rep.HeldApart == nil {
		return rep, fmt.Errorf("%s: no split (run gpureclaim-backtest with --report.held-apart)", path)
	}
	return rep, nil
}

// frontier draws the plot and prints, per set, the frontier at the regret
// share given and where each policy stands.
func frontier(args []string) error {
	fs := flag.NewFlagSet("frontier", flag.ContinueOnError)
	out := fs.String("o", "frontier.svg", "Where the plot goes.")
	title := fs.String("title", "Fixed waits and policies", "The plot's title.")
	regret := fs.Float64("regret", 0.2, "The regret share at which the frontier is read.")
	coldStarts := fs.Float64("cold-starts", 0, "Plot against cold starts per workload-day instead of regret, and read the frontier at this many.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var points []backtest.FrontierPoint
	var policies []string
	for _, a := range fs.Args() {
		kind, rest, ok := strings.Cut(a, ":")
		label, path, ok2 := strings.Cut(rest, "=")
		if !ok || !ok2 || (kind != "wait" && kind != "policy") {
			return fmt.Errorf("%q: want wait:LABEL=REPORT.json or policy:LABEL=REPORT.json", a)
		}
		rep, err := load(path)
		if err != nil {
			return err
		}
		curve := kind == "wait"
		tuned, held := backtest.PointOf(label, *rep.Tuned), backtest.PointOf(label, *rep.HeldApart)
		tuned.Tuned, tuned.Curve, held.Curve = true, curve, curve
		points = append(points, tuned, held)
		if !curve {
			if *coldStarts > 0 {
				policies = append(policies, fmt.Sprintf("| %s | %.0f%% at %.2f cold starts | %.0f%% at %.2f cold starts |",
					label, 100*tuned.Freed, tuned.ColdStarts, 100*held.Freed, held.ColdStarts))
			} else {
				policies = append(policies, fmt.Sprintf("| %s | %.0f%% at %.0f%% regret | %.0f%% at %.0f%% regret |",
					label, 100*tuned.Freed, 100*tuned.Regret, 100*held.Freed, 100*held.Regret))
			}
		}
	}
	var tunedCurve, heldCurve []backtest.FrontierPoint
	for _, p := range points {
		switch {
		case p.Curve && p.Tuned:
			tunedCurve = append(tunedCurve, p)
		case p.Curve:
			heldCurve = append(heldCurve, p)
		}
	}
	axis, at, cost := backtest.ByRegret, *regret, fmt.Sprintf("%.0f%% regret", 100**regret)
	if *coldStarts > 0 {
		axis, at, cost = backtest.ByColdStarts, *coldStarts, fmt.Sprintf("%g cold starts per workload-day", *coldStarts)
	}
	fmt.Printf("| | tuned | held apart |\n| --- | --- | --- |\n")
	fmt.Printf("| best fixed wait with at most %s | %.0f%% | %.0f%% |\n", cost,
		100*backtest.FrontierAt(tunedCurve, axis, at), 100*backtest.FrontierAt(heldCurve, axis, at))
	for _, p := range policies {
		fmt.Println(p)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := backtest.Frontier(f, *title, axis, points); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
