// Package rules generates gpureclaim's Prometheus recording and alerting
// rules from a typed config of thresholds and durations, so that a fleet (or
// the demo, on a compressed clock) can change them and keep one source.
package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Config holds every threshold and duration of the rules. Defaults are the
// design's seed values; see DefaultConfig.
type Config struct {
	// Source is what the rules read: gpureclaim (gpureclaim's exporter) or
	// dcgm (NVIDIA's dcgm-exporter). Default gpureclaim.
	Source string `yaml:"source"`
	// DCGM says how Prometheus scrapes dcgm-exporter, for source: dcgm.
	DCGM       DCGM       `yaml:"dcgm"`
	Idle       Idle       `yaml:"idle"`
	Wasted     Wasted     `yaml:"wasted"`
	Overcommit Overcommit `yaml:"overcommit"`
	MIG        MIG        `yaml:"mig"`
	Packing    Packing    `yaml:"packing"`
	Exporter   Exporter   `yaml:"exporter"`
	Cost       Cost       `yaml:"cost"`
	Links      Links      `yaml:"links"`
	Demand     Demand     `yaml:"demand"`
	// Shards splits the per-unit rules into this many groups, each over the
	// targets whose gpureclaim_shard label (a hashmod relabeling of the
	// scrape, ShardRelabeling) is its number, so that a large fleet's rules
	// evaluate in groups that each take a fraction of the time: Prometheus,
	// Thanos Ruler and Mimir's ruler all run groups concurrently. Default 1
	// (no label needed); see BENCHMARKS.md for a fleet of 10,000 GPUs.
	Shards int `yaml:"shards"`
	// ClusterLabel is the label that names a series' cluster when several
	// clusters' metrics meet in one engine (Thanos, VictoriaMetrics, Mimir):
	// every aggregation and match of the rules keeps it, so that two
	// clusters' pods of the same name stay apart and each alert names its
	// cluster. Series without it (one cluster) give the same results.
	// Default cluster.
	ClusterLabel string `yaml:"cluster_label"`
}

// Idle: a held unit whose activity stays below Threshold for For.
type Idle struct {
	// Threshold is the activity (SM activity, else utilization) under which a unit is idle. Default 0.05.
	Threshold float64 `yaml:"threshold"`
	// For is how long a unit must stay idle before GPUIdle fires. Default 10m.
	For model.Duration `yaml:"for"`
	// Lookback is how far back each evaluation looks for a burst of work, so
	// that bursts between evaluations are not missed. Default 2m.
	Lookback model.Duration `yaml:"lookback"`
	// Aggregation is how the lookback's samples are combined before they
	// are compared with Threshold: max (every sample idle) or avg. Default max.
	Aggregation string `yaml:"aggregation"`
	// ReclaimAfter is how long a unit must stay idle before the reclaimer's
	// copy of GPUIdle fires; people's copy fires after For. Default 45m.
	ReclaimAfter model.Duration `yaml:"reclaim_after"`
	// Pauses, when set, make the reclaimer's copy wait out each workload's
	// own pauses as well.
	Pauses *Pauses `yaml:"pauses"`
	// Quiet, when set, lets the reclaimer's copy fire sooner on a unit
	// whose owner and namespace have gone quiet.
	Quiet *Quiet `yaml:"quiet"`
	// PartlyFor is how long some of a pod's or a Slurm job's GPUs must stay
	// idle while others work before GPUAllocationPartlyIdle tells its
	// owner. Default 1h.
	PartlyFor model.Duration `yaml:"partly_for"`
	// Classes give kinds of workload their own threshold, for,
	// reclaim_after, pauses and quiet; see IdleClass. Default none.
	Classes []IdleClass `yaml:"classes"`
}

// Pauses remembers how long each workload (a unit's owner) paused before
// its work came back, so that a workload that pauses for an hour is not
// taken for one that is gone: the reclaimer's copy of GPUIdle fires only
// once the unit has been idle for ReclaimAfter beyond Factor times the
// longest such pause in Window, at most Max beyond.
type Pauses struct {
	// Window is how far back pauses are remembered. Default 1d.
	Window model.Duration `yaml:"window"`
	// Factor multiplies the longest pause. Default 1.
	Factor float64 `yaml:"factor"`
	// Max caps the wait the pauses add. Default 4h.
	Max model.Duration `yaml:"max"`
}

// Quiet picks the pauses likely to last: the reclaimer's copy of GPUIdle
// fires after After on a unit that was busy for under UnitBusyBelow of
// UnitWindow while its owner held it, in a namespace whose units were
// busy for under NamespaceBusyBelow of NamespaceWindow, counted against
// the most units it held in the last day (the team has stopped for the
// day; units reclaimed count as quiet); otherwise after reclaim_after.
// Busy is activity at or over idle.threshold.
type Quiet struct {
	// After is how long a quiet unit must stay idle before the reclaimer's
	// copy fires; the grace comes on top. Below reclaim_after. Default 10m.
	After model.Duration `yaml:"after"`
	// UnitBusyBelow is the share of UnitWindow under which the unit was
	// busy. Default 0.15.
	UnitBusyBelow float64 `yaml:"unit_busy_below"`
	// UnitWindow is how far back the unit's own work is measured; its
	// owner must have held it that long. Default 4h.
	UnitWindow model.Duration `yaml:"unit_window"`
	// NamespaceBusyBelow is the share of NamespaceWindow under which the
	// namespace's units were busy, on average over the most it held in
	// the last day. Default 0.2.
	NamespaceBusyBelow float64 `yaml:"namespace_busy_below"`
	// NamespaceWindow is how far back the namespace's work is measured.
	// Default 1h.
	NamespaceWindow model.Duration `yaml:"namespace_window"`
}

// fillQuiet gives the fields of quiet left out their defaults and checks
// them against the reclaim_after they shorten.
func fillQuiet(field string, q *Quiet, reclaimAfter model.Duration) []error {
	if q.After == 0 {
		q.After = dur(10 * time.Minute)
	}
	// Chosen on the shared trace's tuned pods (docs/backtest.md).
	if q.UnitBusyBelow == 0 {
		q.UnitBusyBelow = 0.15
	}
	if q.UnitWindow == 0 {
		q.UnitWindow = dur(4 * time.Hour)
	}
	if q.NamespaceBusyBelow == 0 {
		q.NamespaceBusyBelow = 0.2
	}
	if q.NamespaceWindow == 0 {
		q.NamespaceWindow = dur(time.Hour)
	}
	var errs problems
	if q.After < 0 || q.After >= reclaimAfter {
		errs = append(errs, fmt.Errorf("%s.after: %s must be positive and under reclaim_after (%s)", field, q.After, reclaimAfter))
	}
	errs.positive(field+".unit_window", q.UnitWindow)
	errs.positive(field+".namespace_window", q.NamespaceWindow)
	errs.ratio(field+".unit_busy_below", q.UnitBusyBelow)
	errs.ratio(field+".namespace_busy_below", q.NamespaceBusyBelow)
	return errs
}

// fillPauses gives the fields of pauses left out their defaults and
// checks them.
func fillPauses(field string, p *Pauses) []error {
	if p.Window == 0 {
		p.Window = dur(24 * time.Hour)
	}
	if p.Factor == 0 {
		p.Factor = 1
	}
	if p.Max == 0 {
		p.Max = dur(4 * time.Hour)
	}
	var errs problems
	errs.positive(field+".window", p.Window)
	errs.positive(field+".max", p.Max)
	if p.Factor < 0 {
		errs = append(errs, fmt.Errorf("%s.factor: %g must be positive", field, p.Factor))
	}
	return errs
}

// Demand: what pending work asks for GPUs, recorded by resource
// (names.RecGPUsWanted) for the reclaimer's policies that wait for demand,
// and for the fleet dashboard beside the idle supply.
type Demand struct {
	// KueueClusterQueues is a regular expression of the Kueue ClusterQueues
	// whose pending workloads want whole GPUs, each counted as one (Kueue
	// exports their number, not what they ask for). Default ".+"; empty
	// leaves Kueue out.
	KueueClusterQueues string `yaml:"kueue_cluster_queues"`
}

// Wasted: a held unit with low average activity that holds much of its memory.
type Wasted struct {
	// ActivityBelow is the average activity under which a unit is underused. Default 0.2.
	ActivityBelow float64 `yaml:"activity_below"`
	// MemoryAbove is the share of the unit's memory held above which the waste matters. Default 0.5.
	MemoryAbove float64 `yaml:"memory_above"`
	// Window averages the activity. Default 30m.
	Window model.Duration `yaml:"window"`
	// For is how long the unit must stay wasted before GPUWasted fires. Default 15m.
	For model.Duration `yaml:"for"`
}

// Overcommit: a shared unit whose tenants are about to run out of memory or SMs.
type Overcommit struct {
	// MinTenants is the number of owners that makes a unit shared. Default 2.
	MinTenants int `yaml:"min_tenants"`
	// MemoryAbove is the share of memory in use that risks an out-of-memory error. Default 0.95.
	MemoryAbove float64 `yaml:"memory_above"`
	// ActivityAbove is the average activity at which the SMs are saturated. Default 0.95.
	ActivityAbove float64 `yaml:"activity_above"`
	// Window averages the activity. Default 5m.
	Window model.Duration `yaml:"window"`
	// For is how long before GPUOvercommitted fires. Default 5m.
	For model.Duration `yaml:"for"`
}

// MIG: right-sizing of MIG instances.
type MIG struct {
	// PeakWindow is how far back the peak memory and activity are taken. Default 1d.
	PeakWindow model.Duration `yaml:"peak_window"`
	// Headroom is added to the peaks before looking for a smaller profile. Default 0.1.
	Headroom float64 `yaml:"headroom"`
	// For is how long an instance must stay oversized before MIGInstanceOversized fires. Default 1h.
	For model.Duration `yaml:"for"`
}

// Packing: whole GPUs whose one owner, measured over Window, needs at most
// half a GPU, so that two like it could share one (GPUPackable; the
// advisor plans which, on the series).
type Packing struct {
	// Window is how far back each owner's use is measured. Default 7d.
	Window model.Duration `yaml:"window"`
	// Step is the resolution the window's activity is sampled at. Default 5m.
	Step model.Duration `yaml:"step"`
	// Evidence is how long the owner must have held the GPU within Window
	// before it is judged. Default 3d.
	Evidence model.Duration `yaml:"evidence"`
	// Quantile of the activity taken as what the owner needs. Default 0.95.
	Quantile float64 `yaml:"quantile"`
	// ComputeCap bounds the summed activity of the owners of a shared GPU. Default 1 (its capacity).
	ComputeCap float64 `yaml:"compute_cap"`
	// MemoryCap bounds their summed memory, as a share of the GPU's. Default 0.95.
	MemoryCap float64 `yaml:"memory_cap"`
	// Headroom is added to the owner's memory peak: its memory limit. Default 0.1.
	Headroom float64 `yaml:"headroom"`
	// For is how long the owner must stay packable before GPUPackable fires. Default 1h.
	For model.Duration `yaml:"for"`
	// SharedResource is the resource a shared GPU is requested by in the
	// cluster's device plugin config. Default nvidia.com/gpu.shared.
	SharedResource string `yaml:"shared_resource"`
}

// Exporter: health of the exporters.
type Exporter struct {
	// Job is the Prometheus job that scrapes the exporters. Default gpureclaim-exporter.
	Job string `yaml:"job"`
	// DownFor is how long a target may be down. Default 5m.
	DownFor model.Duration `yaml:"down_for"`
	// StaleAfter is the sample age past which an exporter's data is stale. Default 1m.
	StaleAfter model.Duration `yaml:"stale_after"`
	// FailingFor is how long a collector or GPU may fail. Default 10m.
	FailingFor model.Duration `yaml:"failing_for"`
}

// DCGM is how Prometheus scrapes dcgm-exporter.
type DCGM struct {
	// Job is the Prometheus job of dcgm-exporter's targets. Default
	// nvidia-dcgm-exporter (the GPU Operator's ServiceMonitor).
	Job string `yaml:"job"`
	// HonorLabels is the scrape's honor_labels (a ServiceMonitor's
	// honorLabels). False, the default of the GPU Operator and of
	// dcgm-exporter's chart, moves the pod mapping's labels to
	// exported_pod, exported_namespace and exported_container.
	HonorLabels bool `yaml:"honor_labels"`
}

// Cost turns idle GPU-hours into money.
type Cost struct {
	// PricePerGPUHour is what one whole GPU costs an hour. Default 2.5.
	PricePerGPUHour float64 `yaml:"price_per_gpu_hour"`
	// Currency labels the cost series. Default USD.
	Currency string `yaml:"currency"`
	// Window is the span of the idle GPU-hours and cost series. Default 1d.
	Window model.Duration `yaml:"window"`
	// Step is the resolution the idle GPUs are summed at. Default 1m.
	Step model.Duration `yaml:"step"`
}

// Links are put into alert annotations.
type Links struct {
	// Runbook is the runbook's URL; alerts link to its sections (#gpuidle).
	Runbook string `yaml:"runbook"`
	// Grafana is Grafana's base URL, for dashboard links. Default http://localhost:3000; empty leaves them out.
	Grafana string `yaml:"grafana"`
}

// DefaultConfig returns the seed defaults.
func DefaultConfig() Config {
	return Config{
		Source:     SourceGPUreclaim,
		DCGM:       DCGM{Job: names.DCGMDefaultJob},
		Idle:       Idle{Threshold: names.IdleThreshold, For: dur(10 * time.Minute), Lookback: dur(2 * time.Minute), Aggregation: "max", ReclaimAfter: dur(45 * time.Minute), PartlyFor: dur(time.Hour)},
		Wasted:     Wasted{ActivityBelow: 0.2, MemoryAbove: 0.5, Window: dur(30 * time.Minute), For: dur(15 * time.Minute)},
		Overcommit: Overcommit{MinTenants: 2, MemoryAbove: 0.95, ActivityAbove: 0.95, Window: dur(5 * time.Minute), For: dur(5 * time.Minute)},
		MIG:        MIG{PeakWindow: dur(24 * time.Hour), Headroom: 0.1, For: dur(time.Hour)},
		Packing: Packing{Window: dur(7 * 24 * time.Hour), Step: dur(5 * time.Minute), Evidence: dur(3 * 24 * time.Hour), Quantile: 0.95,
			ComputeCap: names.PackComputeCap, MemoryCap: names.PackMemoryCap, Headroom: names.PackHeadroom, For: dur(time.Hour), SharedResource: names.SharedGPUResource},
		Exporter:     Exporter{Job: names.ExporterJob, DownFor: dur(5 * time.Minute), StaleAfter: dur(time.Minute), FailingFor: dur(10 * time.Minute)},
		Cost:         Cost{PricePerGPUHour: 2.5, Currency: "USD", Window: dur(24 * time.Hour), Step: dur(time.Minute)},
		Shards:       1,
		ClusterLabel: names.LabelCluster,
		Links:        Links{Runbook: "https://github.com/gpureclaim/gpureclaim/blob/main/rules/runbook.md", Grafana: "http://localhost:3000"},
		Demand:       Demand{KueueClusterQueues: ".+"},
	}
}

func dur(d time.Duration) model.Duration { return model.Duration(d) }

// Load reads a config file; fields it leaves out keep their defaults.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// RenderFile renders the rules of the config file at path.
func RenderFile(path string) ([]byte, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	return Render(c)
}

// Parse reads and validates a config.
func Parse(b []byte) (Config, error) {
	c := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	// Decoding over the defaults keeps every field the file leaves out.
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, err
	}
	return c, c.Validate()
}

var (
	jobName = regexp.MustCompile(`^[a-zA-Z0-9_.:-]+$`)
	// resourceName is a Kubernetes extended resource name: a domain prefix
	// and a name; it goes into alert text, so nothing else passes.
	resourceName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9._-]*[a-zA-Z0-9])?$`)
)

// problems collects a config's errors, each naming its field; ratio and
// positive are the checks many fields share.
type problems []error

// ratio: a share strictly between 0 and 1.
func (p *problems) ratio(field string, v float64) {
	if v <= 0 || v >= 1 {
		*p = append(*p, fmt.Errorf("%s: %g must be between 0 and 1 (exclusive)", field, v))
	}
}

// positive: a duration above zero.
func (p *problems) positive(field string, d model.Duration) {
	if d <= 0 {
		*p = append(*p, fmt.Errorf("%s: must be a positive duration (e.g. 10m)", field))
	}
}

// Validate checks every field and names the first one that is wrong.
func (c *Config) Validate() error {
	var errs problems
	if c.Source != SourceGPUreclaim && c.Source != SourceDCGM {
		errs = append(errs, fmt.Errorf("source: %q is not %s or %s", c.Source, SourceGPUreclaim, SourceDCGM))
	}
	if !jobName.MatchString(c.DCGM.Job) {
		errs = append(errs, fmt.Errorf("dcgm.job: %q is not a job name", c.DCGM.Job))
	}
	errs.ratio("idle.threshold", c.Idle.Threshold)
	errs.positive("idle.for", c.Idle.For)
	errs.positive("idle.lookback", c.Idle.Lookback)
	if c.Idle.Aggregation != "max" && c.Idle.Aggregation != "avg" {
		errs = append(errs, fmt.Errorf("idle.aggregation: %q is not max or avg", c.Idle.Aggregation))
	}
	errs.positive("idle.reclaim_after", c.Idle.ReclaimAfter)
	errs.positive("idle.partly_for", c.Idle.PartlyFor)
	if p := c.Idle.Pauses; p != nil {
		errs = append(errs, fillPauses("idle.pauses", p)...)
	}
	if q := c.Idle.Quiet; q != nil {
		errs = append(errs, fillQuiet("idle.quiet", q, c.Idle.ReclaimAfter)...)
	}
	errs = append(errs, c.validateClasses()...)
	errs.ratio("wasted.activity_below", c.Wasted.ActivityBelow)
	if c.Wasted.ActivityBelow <= c.Idle.Threshold {
		errs = append(errs, fmt.Errorf("wasted.activity_below: %g must be above idle.threshold (%g), or no unit is ever wasted but not idle", c.Wasted.ActivityBelow, c.Idle.Threshold))
	}
	errs.ratio("wasted.memory_above", c.Wasted.MemoryAbove)
	errs.positive("wasted.window", c.Wasted.Window)
	errs.positive("wasted.for", c.Wasted.For)
	if c.Overcommit.MinTenants < 2 {
		errs = append(errs, fmt.Errorf("overcommit.min_tenants: %d; a unit is shared by 2 or more", c.Overcommit.MinTenants))
	}
	errs.ratio("overcommit.memory_above", c.Overcommit.MemoryAbove)
	errs.ratio("overcommit.activity_above", c.Overcommit.ActivityAbove)
	errs.positive("overcommit.window", c.Overcommit.Window)
	errs.positive("overcommit.for", c.Overcommit.For)
	errs.positive("mig.peak_window", c.MIG.PeakWindow)
	if !model.LegacyValidation.IsValidLabelName(c.ClusterLabel) || strings.HasPrefix(c.ClusterLabel, "__") {
		errs = append(errs, fmt.Errorf("cluster_label: %q is not a label name", c.ClusterLabel))
	}
	if c.Shards < 1 || c.Shards > maxShards {
		errs = append(errs, fmt.Errorf("shards: %d is not from 1 to %d", c.Shards, maxShards))
	}
	if c.MIG.Headroom < 0 || c.MIG.Headroom > 1 {
		errs = append(errs, fmt.Errorf("mig.headroom: %g must be between 0 and 1", c.MIG.Headroom))
	}
	errs.positive("mig.for", c.MIG.For)
	pk := c.Packing
	errs.positive("packing.window", pk.Window)
	errs.positive("packing.step", pk.Step)
	errs.positive("packing.evidence", pk.Evidence)
	errs.positive("packing.for", pk.For)
	if pk.Step > pk.Window {
		errs = append(errs, fmt.Errorf("packing.step: %s is longer than packing.window (%s)", pk.Step, pk.Window))
	}
	if pk.Evidence > pk.Window {
		errs = append(errs, fmt.Errorf("packing.evidence: %s is longer than packing.window (%s): no owner would ever have enough", pk.Evidence, pk.Window))
	}
	errs.ratio("packing.quantile", pk.Quantile)
	for _, f := range []struct {
		field string
		v     float64
	}{{"packing.compute_cap", pk.ComputeCap}, {"packing.memory_cap", pk.MemoryCap}} {
		if f.v <= 0 || f.v > 1 {
			errs = append(errs, fmt.Errorf("%s: %g must be in (0, 1]", f.field, f.v))
		}
	}
	if pk.Headroom < 0 || pk.Headroom > 1 {
		errs = append(errs, fmt.Errorf("packing.headroom: %g must be between 0 and 1", pk.Headroom))
	}
	if !resourceName.MatchString(pk.SharedResource) {
		errs = append(errs, fmt.Errorf("packing.shared_resource: %q is not an extended resource name (vendor.example/name)", pk.SharedResource))
	}
	if !jobName.MatchString(c.Exporter.Job) {
		errs = append(errs, fmt.Errorf("exporter.job: %q is not a job name", c.Exporter.Job))
	}
	errs.positive("exporter.down_for", c.Exporter.DownFor)
	errs.positive("exporter.stale_after", c.Exporter.StaleAfter)
	errs.positive("exporter.failing_for", c.Exporter.FailingFor)
	if c.Cost.PricePerGPUHour < 0 {
		errs = append(errs, fmt.Errorf("cost.price_per_gpu_hour: %g must not be negative", c.Cost.PricePerGPUHour))
	}
	if !regexp.MustCompile(`^[A-Z]{3}$`).MatchString(c.Cost.Currency) {
		errs = append(errs, fmt.Errorf("cost.currency: %q is not an ISO 4217 code (e.g. USD)", c.Cost.Currency))
	}
	errs.positive("cost.window", c.Cost.Window)
	errs.positive("cost.step", c.Cost.Step)
	if c.Cost.Step > c.Cost.Window {
		errs = append(errs, fmt.Errorf("cost.step: %s is longer than cost.window (%s)", c.Cost.Step, c.Cost.Window))
	}
	if _, err := regexp.Compile("^(?:" + c.Demand.KueueClusterQueues + ")$"); err != nil {
		errs = append(errs, fmt.Errorf("demand.kueue_cluster_queues: %q is not a regular expression: %v", c.Demand.KueueClusterQueues, err))
	}
	for _, l := range []struct{ field, url string }{{"links.runbook", c.Links.Runbook}, {"links.grafana", c.Links.Grafana}} {
		field, u := l.field, l.url
		if u == "" && field == "links.grafana" {
			continue
		}
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("%s: %q is not an http(s) URL", field, u))
		}
	}
	return errors.Join(errs...)
}
