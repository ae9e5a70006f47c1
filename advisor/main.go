// Command gpureclaim-advisor plans, from the GPU use a history records,
// which workloads can share a GPU or fit a smaller MIG slice: it plans on
// the first part of the history, replays the plan on the rest, and
// reports what it frees, what it risks, and the change each owner makes.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"

	"github.com/gpureclaim/gpureclaim/advisor/packing"
	"github.com/gpureclaim/gpureclaim/internal/cli"
	"github.com/gpureclaim/gpureclaim/internal/trace"
	"github.com/gpureclaim/gpureclaim/reclaimer/backtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

type options struct {
	trace, prometheus, promURL string
	promHTTPConfig             string
	window, step, timeout      time.Duration
	dcgmHonorLabels            bool
	model                      string
	packing                    packing.Options
	exclusive                  cli.StringList
	format, svg                string
	heldApart                  float64
	part                       string
	printVersion               bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{packing: packing.DefaultOptions()}
	fs := flag.NewFlagSet("gpureclaim-advisor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: gpureclaim-advisor (--history.trace=FILE | --history.prometheus=FILE | --prometheus.url=URL) [flags]")
		fmt.Fprintln(stderr, "\nPlans, from measured GPU use, which workloads can share a GPU or fit a smaller MIG slice; plans on the first part of the history and replays the plan on the rest.")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.trace, "history.trace", "", "A trace CSV (timestamp, pod, gpu_duty_cycle_percent, gpu_memory_used_bytes; gzipped or not).")
	fs.StringVar(&o.prometheus, "history.prometheus", "", "A Prometheus range-query export (the JSON of /api/v1/query_range) of the exporter's unit metrics or of dcgm-exporter's fields, as the backtest reads.")
	fs.BoolVar(&o.dcgmHonorLabels, "history.dcgm-honor-labels", false, "The dcgm-exporter export was scraped with honor_labels.")
	fs.StringVar(&o.promURL, "prometheus.url", "", "Read the history from this Prometheus (query_range of the exporter's unit metrics over --prometheus.window).")
	fs.StringVar(&o.promHTTPConfig, "prometheus.http-config-file", "", "A file of Prometheus's HTTP client settings for --prometheus.url (authorization, basic_auth, oauth2, tls_config, proxy_url), as promtool's --http.config.file.")
	fs.DurationVar(&o.window, "prometheus.window", 7*24*time.Hour, "How far back --prometheus.url is read.")
	fs.DurationVar(&o.step, "prometheus.step", time.Minute, "The step of the range query.")
	fs.DurationVar(&o.timeout, "prometheus.timeout", 2*time.Minute, "Timeout of the range query.")
	fs.StringVar(&o.model, "gpu.model", "H100-80GB", "The GPU model the workloads run on: "+strings.Join(packing.ModelNames(), ", ")+".")
	fs.Float64Var(&o.packing.ComputeCap, "plan.compute-cap", o.packing.ComputeCap, "Summed activity on a shared GPU stays under this at every planning step (0-1].")
	fs.Float64Var(&o.packing.ComputeSlack, "plan.compute-slack", o.packing.ComputeSlack, "Share of the planning steps a shared GPU's summed activity may pass the compute cap [0-1).")
	fs.BoolVar(&o.packing.Exact, "plan.exact", o.packing.Exact, "Search for the plan on the fewest GPUs within the caps and keep it over first fit's; the report says whether it proved the optimum.")
	fs.BoolVar(&o.packing.Bound, "plan.bound", false, "Also check every pair and triple of packable workloads for the fewest GPUs any plan within the caps holds: a check of the plan, cubic in the workloads.")
	fs.Float64Var(&o.packing.MemoryCap, "plan.memory-cap", o.packing.MemoryCap, "Summed memory on a shared GPU stays under this share of its memory (0-1].")
	fs.Float64Var(&o.packing.Headroom, "plan.headroom", o.packing.Headroom, "Added to each workload's memory (its peak, for its limit) [0-1].")
	fs.BoolVar(&o.packing.MemoryBySeries, "plan.memory-by-series", o.packing.MemoryBySeries, "Pack by the summed memory at every planning step; false packs by the summed peaks.")
	fs.Float64Var(&o.packing.PlanShare, "plan.share", o.packing.PlanShare, "The share of the history the plan is made on; the rest replays it (0-1).")
	fs.Var(&o.exclusive, "exclusive", "A workload id or an owner (namespace) never packed: latency-sensitive serving, or marked gpureclaim.io/exclusive (repeatable).")
	fs.Float64Var(&o.packing.CostPerGPUHour, "cost.per-gpu-hour", 0, "The price of a GPU-hour (the rules' cost config), for the cost saved.")
	fs.StringVar(&o.packing.Currency, "cost.currency", "USD", "The currency of --cost.per-gpu-hour.")
	fs.StringVar(&o.part, "workloads", "all", "Which workloads to plan: all; tuned (those a default is chosen on) or held-apart (those it is reported on), split as the backtest splits them.")
	fs.Float64Var(&o.heldApart, "workloads.held-apart", 0.5, "The share of workloads held apart (by the FNV-1a hash of the id, the backtest's split).")
	fs.StringVar(&o.format, "format", "text", "Report format: text, markdown or json.")
	fs.StringVar(&o.svg, "svg", "", "Also draw the plan into this SVG file.")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	p := &o.packing
	n := 0
	for _, s := range []string{o.trace, o.prometheus, o.promURL} {
		if s != "" {
			n++
		}
	}
	model, ok := packing.ModelOf(o.model)
	p.Model = model
	switch {
	case o.printVersion:
		return o, nil
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	case n != 1:
		return nil, errors.New("give one history: --history.trace, --history.prometheus or --prometheus.url")
	case !ok:
		return nil, fmt.Errorf("--gpu.model: %q is not one of %s", o.model, strings.Join(packing.ModelNames(), ", "))
	case p.ComputeCap <= 0 || p.ComputeCap > 1:
		return nil, fmt.Errorf("--plan.compute-cap: %g must be over 0 and at most 1", p.ComputeCap)
	case p.ComputeSlack < 0 || p.ComputeSlack >= 1:
		return nil, fmt.Errorf("--plan.compute-slack: %g must be at least 0 and under 1", p.ComputeSlack)
	case p.MemoryCap <= 0 || p.MemoryCap > 1:
		return nil, fmt.Errorf("--plan.memory-cap: %g must be over 0 and at most 1", p.MemoryCap)
	case p.Headroom < 0 || p.Headroom > 1:
		return nil, fmt.Errorf("--plan.headroom: %g must be between 0 and 1", p.Headroom)
	case p.PlanShare <= 0 || p.PlanShare >= 1:
		return nil, fmt.Errorf("--plan.share: %g must be between 0 and 1", p.PlanShare)
	case o.heldApart <= 0 || o.heldApart >= 1:
		return nil, fmt.Errorf("--workloads.held-apart: %g must be between 0 and 1", o.heldApart)
	case o.part != "all" && o.part != "tuned" && o.part != "held-apart":
		return nil, fmt.Errorf("--workloads: %q is not all, tuned or held-apart", o.part)
	case o.format != "text" && o.format != "markdown" && o.format != "json":
		return nil, fmt.Errorf("--format: %q is not text, markdown or json", o.format)
	case o.promURL != "" && (o.window <= 0 || o.step <= 0 || o.window < 2*o.step):
		return nil, errors.New("--prometheus.window must hold at least two --prometheus.step")
	case o.promHTTPConfig != "" && o.promURL == "":
		return nil, errors.New("--prometheus.http-config-file: it is for --prometheus.url")
	}
	return o, nil
}

// tool is the command: flags, --version, the work.
var tool = cli.Tool[*options]{Name: "gpureclaim-advisor", Parse: parseFlags, Version: func(o *options) bool { return o.printVersion }, Do: advise}

func main() { tool.Main() }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return tool.Run(ctx, args, stdout, stderr)
}

func advise(ctx context.Context, o *options, stdout io.Writer) error {
	h, err := history(ctx, o)
	if err != nil {
		return err
	}
	o.packing.Step = h.Step
	exclusive := map[string]bool{}
	for _, e := range o.exclusive {
		exclusive[e] = true
	}
	var ws []packing.Workload
	for _, w := range h.Workloads {
		if apart := backtest.IsHeldApart(w.ID, o.heldApart); o.part == "tuned" && apart || o.part == "held-apart" && !apart {
			continue
		}
		pw := packing.Workload{ID: w.ID, Domain: w.Owner, Owner: w.Owner, Activity: w.Activity, Memory: w.Memory}
		if exclusive[w.ID] || exclusive[w.Owner] {
			pw.Exclusive, pw.ExclusiveWhy = true, "--exclusive"
		}
		ws = append(ws, pw)
	}
	p, err := packing.Make(ws, h.Start, o.packing)
	if err != nil {
		return err
	}
	if o.svg != "" {
		var b bytes.Buffer
		if err := p.SVG(&b); err != nil {
			return err
		}
		if err := os.WriteFile(o.svg, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	switch o.format {
	case "markdown":
		return p.Markdown(stdout)
	case "json":
		return p.JSON(stdout)
	}
	return p.Text(stdout)
}

// history reads the history the flags name.
func history(ctx context.Context, o *options) (backtest.History, error) {
	switch {
	case o.trace != "":
		tr, err := trace.Load(o.trace)
		if err != nil {
			return backtest.History{}, fmt.Errorf("--history.trace: %w", err)
		}
		return backtest.FromTrace(tr, reclaim.TopOwner{}), nil
	case o.prometheus != "":
		f, err := os.Open(o.prometheus)
		if err != nil {
			return backtest.History{}, fmt.Errorf("--history.prometheus: %w", err)
		}
		defer f.Close()
		return backtest.FromPrometheus(f, reclaim.TopOwner{}, o.dcgmHonorLabels)
	}
	b, err := queryRange(ctx, o)
	if err != nil {
		return backtest.History{}, fmt.Errorf("--prometheus.url: %w", err)
	}
	return backtest.FromPrometheus(bytes.NewReader(b), reclaim.TopOwner{}, false)
}

// maxExport bounds a range query's answer: a week of minutes of a large
// fleet's unit series is some hundreds of MB.
const maxExport = 1 << 30

// promClient is the client of --prometheus.url: its HTTP client settings,
// or a plain client.
func promClient(file string) (*http.Client, error) {
	if file == "" {
		return http.DefaultClient, nil
	}
	cfg, _, err := promconfig.LoadHTTPConfigFile(file)
	if err != nil {
		return nil, fmt.Errorf("--prometheus.http-config-file: %w", err)
	}
	hc, err := promconfig.NewClientFromConfig(*cfg, "prometheus", promconfig.WithUserAgent("gpureclaim-advisor"))
	if err != nil {
		return nil, fmt.Errorf("--prometheus.http-config-file: %w", err)
	}
	return hc, nil
}

// queryRange reads the backtest's export of the last window from a live
// Prometheus.
func queryRange(ctx context.Context, o *options) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	end := time.Now().Truncate(o.step)
	form := url.Values{"query": {backtest.ExportQuery}, "start": {fmt.Sprint(end.Add(-o.window).Unix())}, "end": {fmt.Sprint(end.Unix())},
		"step": {fmt.Sprint(o.step.Seconds())}, "timeout": {o.timeout.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(o.promURL, "/")+"/api/v1/query_range", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hc, err := promClient(o.promHTTPConfig)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxExport+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxExport {
		return nil, fmt.Errorf("the answer is over %d bytes: shorten --prometheus.window or lengthen --prometheus.step", maxExport)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %.300s", resp.Status, b)
	}
	return b, nil
}
