package rules

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// File is a Prometheus rule file.
type File struct {
	Groups []Group `yaml:"groups"`
}

// Group is a rule group.
type Group struct {
	Name string `yaml:"name"`
	// Interval overrides the global evaluation interval: a long window
	// need not be read every minute.
	Interval string `yaml:"interval,omitempty"`
	Rules    []Rule `yaml:"rules"`
}

// Rule is a recording or an alerting rule.
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        Expr              `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Expr is a PromQL expression, written as a YAML block when it spans lines.
type Expr string

func (e Expr) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: string(e)}
	if strings.Contains(string(e), "\n") {
		n.Style = yaml.LiteralStyle
	}
	return n, nil
}

const (
	ownerLabels = "namespace, pod, container, user, slurm_job"
	unitContext = "node, kind, mig_profile, model"
	// ownerKey identifies a unit's owner among the records per owner.
	ownerKey = "uuid, " + ownerLabels
)

// RecActivityLookback is the record of the activity combined over the idle
// lookback (uuid:gpureclaim_unit_activity:max_idle_lookback by default).
func RecActivityLookback(c Config) string {
	return "uuid:gpureclaim_unit_activity:" + c.Idle.Aggregation + "_idle_lookback"
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Generate builds the rule file for a config.
func Generate(c Config) File {
	// A unit's records and alerts share their group: a group evaluates in
	// order, so a rule sees this evaluation's records, not the last one's
	// (groups run on their own timers, in no set order). With shards, each
	// group holds the same rules over its share of the units.
	units := append(append(dcgmRules(c), unitRules(c)...), alerts(c)...)
	var groups []Group
	if c.Shards <= 1 {
		groups = append(groups, Group{Name: unitGroup, Rules: units})
	} else {
		units = append(units, shardSums(c)...)
		add := func(group, name, input string) {
			rs, err := shard(units, name, input)
			if err != nil {
				panic(fmt.Sprintf("the generator wrote a rule PromQL does not parse: %v", err)) // a bug, not a config error
			}
			groups = append(groups, Group{Name: unitGroup + "." + group, Rules: rs})
		}
		for k := range c.Shards {
			add(fmt.Sprintf("%03d", k), ShardName(k), ShardName(k))
		}
		add(unlabeledShard, unlabeledShard, "")
	}
	// The fleet's sums read every shard's records: one evaluation behind
	// them, which a dashboard does not see.
	return File{Groups: append(groups,
		Group{Name: "gpureclaim.fleet", Rules: append(fleetRules(c), demandRules(c)...)},
		Group{Name: packingGroup, Interval: c.Packing.Step.String(), Rules: packingRules(c)},
		Group{Name: "gpureclaim.exporter", Rules: exporterRules(c)},
	)}
}

// unitGroup names the group of the per-unit rules (with shards, its prefix).
const unitGroup = "gpureclaim.units"

// fleetFromShards are the fleet's records from the shards' sums.
func fleetFromShards(c Config) []Rule {
	rs := []Rule{
		{Record: names.RecFleetTotal, Expr: Expr("sum(" + names.RecShardTotal + ")")},
		{Record: names.RecFleetHeld, Expr: Expr("sum(" + names.RecShardHeld + ")")},
		{Record: names.RecFleetUsed, Expr: Expr("sum(" + names.RecShardUsed + ")")},
		{Record: names.RecFleetIdleHeld, Expr: Expr("sum(" + names.RecShardIdleHeld + ") or vector(0)")},
		{Record: names.RecFleetEffective, Expr: Expr(fmt.Sprintf("%s / (%s > 0)", names.RecFleetUsed, names.RecFleetHeld))},
		{Record: names.RecOwnerIdle, Expr: Expr(fmt.Sprintf("sum by (%s) (%s)", ownerLabels, names.RecShardOwnerIdle))},
		{Record: names.RecNamespaceIdle, Expr: Expr(fmt.Sprintf("sum by (namespace) (%s)", names.RecShardOwnerIdle))},
		{Record: names.RecOwnerIdleHours, Expr: Expr(fmt.Sprintf("sum by (%s) (%s)", ownerLabels, names.RecShardOwnerIdleHours))},
		{Record: names.RecNSIdleHours, Expr: Expr(fmt.Sprintf("sum by (namespace) (%s)", names.RecShardOwnerIdleHours))},
	}
	rs = append(rs, costRules(c)...)
	if c.inputs().rightsizing {
		rs = append(rs, Rule{Record: names.RecFleetMIGFreed, Expr: Expr("sum(" + names.RecShardMIGFreed + ") or vector(0)")})
	}
	return rs
}

// Render writes the rule file as YAML.
func Render(c Config) ([]byte, error) {
	return render(Generate(c))
}

// RenderSplit writes the rules as files of at most perFile groups each,
// for a sharded fleet whose rules are too large for one object (a
// PrometheusRule is stored in etcd, 1.5 MiB at most). Every file stands
// alone: Prometheus loads the groups of all of them.
func RenderSplit(c Config, perFile int) ([][]byte, error) {
	f := Generate(c)
	var out [][]byte
	for i := 0; i < len(f.Groups); i += perFile {
		b, err := render(File{Groups: f.Groups[i:min(i+perFile, len(f.Groups))]})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func render(f File) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString("# Generated by `make rules` (go run ./rules/gen) from rules.Config. Do not edit.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// allocKey is what a pod's or a Slurm job's allocation is kept per.
const allocKey = "namespace, pod, user, slurm_job"

// allocCount counts a record's units per pod and per Slurm job.
func allocCount(rec string) string {
	return fmt.Sprintf("  count by (%s) (%s{pod!=\"\"})\nor\n  count by (%s) (%s{slurm_job!=\"\"})\n", allocKey, rec, allocKey, rec)
}

// idleHeld is every holder of an idle unit, and, where the source gives
// each holder's own activity, a holder of a shared unit busy with the
// others' work whose own share of it stayed below the threshold (or that
// ran no process) over the lookback: for each idle class, by its
// threshold.
func idleHeld(c Config, in inputs) string {
	var parts []string
	for _, k := range c.idleClasses() {
		parts = append(parts, k.idleHeld(c, in))
	}
	return strings.Join(parts, "or\n")
}

func (k idleClass) idleHeld(c Config, in inputs) string {
	thr := num(k.threshold)
	unit := fmt.Sprintf(`  %s
* on (uuid) group_left (signal)
  (%s < %s)
`, k.held(), RecActivityLookback(c), thr)
	if in.holderSMUtil == "" {
		return unit
	}
	agg, lb := c.Idle.Aggregation, c.Idle.Lookback
	return unit + fmt.Sprintf(`or
  (
      %s
    * on (%s) group_left (signal)
      label_replace(
        (%s_over_time(%s[%s]) or (max_over_time(%s[%s]) == 0)) < %s,
        "signal", %q, "", "")
  )
  and on (uuid) (%s >= %s)
  and on (uuid) (%s > 1)
`, k.held(), ownerKey, agg, in.holderSMUtil, lb, in.holderProcesses, lb, thr, names.SignalHolder,
		RecActivityLookback(c), thr, names.RecOwners)
}

func unitRules(c Config) []Rule {
	h := num(1 + c.MIG.Headroom)
	in := c.inputs()
	rs := []Rule{
		{Record: names.RecActivity, Expr: Expr(fmt.Sprintf(`  label_replace(max by (uuid, gpu_uuid) (%s), "signal", "sm_active", "", "")
or on (uuid)
  label_replace(max by (uuid, gpu_uuid) (%s), "signal", "utilization", "", "")
`, in.smActive, in.utilization))},
		{Record: RecActivityLookback(c), Expr: Expr(fmt.Sprintf("%s_over_time(%s[%s])", c.Idle.Aggregation, names.RecActivity, c.Idle.Lookback))},
		{Record: names.RecActivityWaste, Expr: Expr(fmt.Sprintf("avg_over_time(%s[%s])", names.RecActivity, c.Wasted.Window))},
		{Record: names.RecMemoryRatio, Expr: Expr(fmt.Sprintf("max by (uuid, gpu_uuid) (%s)\n/\nmax by (uuid, gpu_uuid) (%s > 0)\n", in.memUsed, in.memTotal))},
		{Record: names.RecSize, Expr: Expr(fmt.Sprintf(`  max by (uuid, gpu_uuid) (%s{kind="gpu"})
or on (uuid)
  max by (uuid, gpu_uuid) (%s) / 7
`, in.unitInfo, in.migSlices))},
		{Record: names.RecOwners, Expr: Expr(fmt.Sprintf("count by (uuid, gpu_uuid) (%s)", in.ownerInfo))},
		{Record: names.RecHeld, Expr: Expr(fmt.Sprintf(`  max by (uuid, gpu_uuid, %s, keep) (%s)
* on (uuid) group_left (%s)
  max by (uuid, %s) (%s)
`, ownerLabels, in.ownerInfo, unitContext, unitContext, in.unitInfo))},
	}
	rs = append(rs, ownerClassRule(c)...)
	rs = append(rs, []Rule{
		{Record: names.RecIdleHeld, Expr: Expr(idleHeld(c, in))},
		{Record: names.RecIdleHeldGPUs, Expr: Expr(fmt.Sprintf(`  (%s * 0 + 1)
* on (uuid) group_left ()
  (%s / %s)
`, names.RecIdleHeld, names.RecSize, names.RecOwners))},
		{Record: names.RecAllocUnits, Expr: Expr(allocCount(names.RecHeld))},
		{Record: names.RecAllocIdle, Expr: Expr(allocCount(names.RecIdleHeld))},
		// A bare-metal process is killed on its unit alone; a pod or a job
		// is stopped whole, so its idle units count only when all are.
		{Record: names.RecIdleWhole, Expr: Expr(fmt.Sprintf("%s\nunless on (%s)\n  (%s < %s)\n", names.RecIdleHeld, allocKey, names.RecAllocIdle, names.RecAllocUnits))},
		{Record: names.RecWastedMemory, Expr: Expr(fmt.Sprintf(`  max by (uuid, gpu_uuid) (%s)
and on (uuid) (%s < %s)
and on (uuid) %s
`, in.memUsed, names.RecActivityWaste, num(c.Wasted.ActivityBelow), names.RecOwners))},
		{Record: names.RecMemoryPressure, Expr: Expr(fmt.Sprintf("%s\nand on (uuid) (%s >= %d)\n", names.RecMemoryRatio, names.RecOwners, c.Overcommit.MinTenants))},
		{Record: names.RecSMSaturation, Expr: Expr(fmt.Sprintf("avg_over_time(%s[%s])\nand on (uuid) (%s >= %d)\n", names.RecActivity, c.Overcommit.Window, names.RecOwners, c.Overcommit.MinTenants))},
		// A whole GPU's one owner: what the packing group measures over its window.
		{Record: names.RecOwnerActivity, Expr: Expr(fmt.Sprintf(`  %s{kind="gpu"}
* on (uuid) group_left (signal)
  %s
and on (uuid) (%s == 1)
`, names.RecHeld, names.RecActivity, names.RecOwners))},
		{Record: names.RecOwnerMemory, Expr: Expr(fmt.Sprintf(`  %s{kind="gpu"}
* on (uuid) group_left ()
  max by (uuid) (%s)
and on (uuid) (%s == 1)
`, names.RecHeld, in.memUsed, names.RecOwners))},
	}...)
	if in.rightsizing {
		rs = append(rs, rightsizeRules(c, h)...)
	}
	return append(rs, pauseRules(c)...)
}

// rightsizeRules find, for each MIG instance, the smallest profile its
// GPU can make that fits its peak use: they need the exporter's table of
// profiles.
func rightsizeRules(c Config, h string) []Rule {
	return []Rule{
		// The window is long: read MIG instances only (NVML names them MIG-...).
		{Record: names.RecMemoryPeak, Expr: Expr(fmt.Sprintf("max by (uuid, gpu_uuid) (max_over_time(gpureclaim_unit_memory_used_bytes{uuid=~\"MIG-.+\"}[%s]))\nand on (uuid) gpureclaim_mig_instance_slices\n", c.MIG.PeakWindow))},
		{Record: names.RecActivityPeak, Expr: Expr(fmt.Sprintf("max_over_time(%s[%s])\nand on (uuid) gpureclaim_mig_instance_slices\n", names.RecActivity, c.MIG.PeakWindow))},
		// The smallest profile whose memory fits the peak and whose slices fit
		// the peak activity, both with headroom; ties go to fewer slices (the
		// score adds the slices to the bytes). Without an activity signal the
		// instance keeps its slices.
		{Record: names.RecRightsizeScore, Expr: Expr(fmt.Sprintf(`bottomk by (uuid) (1,
  (
      (max by (uuid, gpu_uuid, profile) (gpureclaim_mig_profile_memory_bytes) >= on (uuid) group_left () (%s * %s))
    + on (uuid, profile) group_left ()
      (max by (uuid, profile) (gpureclaim_mig_profile_slices)
        >= on (uuid) group_left ()
          (
              max by (uuid) (gpureclaim_mig_instance_slices)
            * on (uuid) (max by (uuid) (%s) * %s or on (uuid) max by (uuid) (gpureclaim_mig_instance_slices) * 0 + 1)
          ))
  )
)
`, names.RecMemoryPeak, h, names.RecActivityPeak, h))},
		{Record: names.RecRightsizeMemory, Expr: Expr(fmt.Sprintf("max by (uuid, gpu_uuid, profile) (gpureclaim_mig_profile_memory_bytes)\nand on (uuid, profile) %s\n", names.RecRightsizeScore))},
		{Record: names.RecRightsizeFreed, Expr: Expr(fmt.Sprintf("  max by (uuid, gpu_uuid) (gpureclaim_unit_memory_total_bytes)\n- on (uuid) group_right ()\n  %s\n", names.RecRightsizeMemory))},
	}
}

// shardSums are a shard's share of the fleet's sums: the fleet group adds
// up a series a shard rather than one a unit.
func shardSums(c Config) []Rule {
	rs := []Rule{
		{Record: names.RecShardTotal, Expr: Expr("sum(" + names.RecSize + ") or vector(0)")},
		{Record: names.RecShardHeld, Expr: Expr(fmt.Sprintf("sum(%s and on (uuid) %s) or vector(0)", names.RecSize, names.RecOwners))},
		{Record: names.RecShardUsed, Expr: Expr(fmt.Sprintf("sum(%s * on (uuid) group_left () %s and on (uuid) %s) or vector(0)", names.RecSize, names.RecActivity, names.RecOwners))},
		{Record: names.RecShardIdleHeld, Expr: Expr(fmt.Sprintf("sum(%s) or vector(0)", names.RecIdleHeldGPUs))},
		{Record: names.RecShardOwnerIdle, Expr: Expr(fmt.Sprintf("sum by (%s) (%s)", ownerLabels, names.RecIdleHeldGPUs))},
		{Record: names.RecShardOwnerIdleHours, Expr: Expr(fmt.Sprintf("sum_over_time(%s[%s:%s]) * %s", names.RecShardOwnerIdle, c.Cost.Window, c.Cost.Step, num(time.Duration(c.Cost.Step).Hours())))},
	}
	if c.inputs().rightsizing {
		rs = append(rs, Rule{Record: names.RecShardMIGFreed, Expr: Expr(fmt.Sprintf("sum(%s) or vector(0)", names.RecRightsizeFreed))})
	}
	return rs
}

func fleetRules(c Config) []Rule {
	if c.Shards > 1 {
		return fleetFromShards(c)
	}
	perStep := num(time.Duration(c.Cost.Step).Hours())
	rs := []Rule{
		{Record: names.RecFleetTotal, Expr: Expr("sum(" + names.RecSize + ")")},
		{Record: names.RecFleetHeld, Expr: Expr(fmt.Sprintf("sum(%s and on (uuid) %s)", names.RecSize, names.RecOwners))},
		{Record: names.RecFleetUsed, Expr: Expr(fmt.Sprintf("sum(%s * on (uuid) group_left () %s and on (uuid) %s)", names.RecSize, names.RecActivity, names.RecOwners))},
		{Record: names.RecFleetIdleHeld, Expr: Expr(fmt.Sprintf("sum(%s) or vector(0)", names.RecIdleHeldGPUs))},
		{Record: names.RecFleetEffective, Expr: Expr(fmt.Sprintf("%s / (%s > 0)", names.RecFleetUsed, names.RecFleetHeld))},
		{Record: names.RecOwnerIdle, Expr: Expr(fmt.Sprintf("sum by (%s) (%s)", ownerLabels, names.RecIdleHeldGPUs))},
		{Record: names.RecNamespaceIdle, Expr: Expr(fmt.Sprintf("sum by (namespace) (%s)", names.RecIdleHeldGPUs))},
		// A subquery at a fixed step counts idle GPU-hours whatever the
		// evaluation interval: the idle series exist only while idle.
		{Record: names.RecOwnerIdleHours, Expr: Expr(fmt.Sprintf("sum_over_time(%s[%s:%s]) * %s", names.RecOwnerIdle, c.Cost.Window, c.Cost.Step, perStep))},
		{Record: names.RecNSIdleHours, Expr: Expr(fmt.Sprintf("sum_over_time(%s[%s:%s]) * %s", names.RecNamespaceIdle, c.Cost.Window, c.Cost.Step, perStep))},
	}
	rs = append(rs, costRules(c)...)
	if c.inputs().rightsizing {
		rs = append(rs, Rule{Record: names.RecFleetMIGFreed, Expr: Expr(fmt.Sprintf("sum(%s) or vector(0)", names.RecRightsizeFreed))})
	}
	return rs
}

// demandRules record the GPUs pending work asks for: pending pods'
// requests (kube-state-metrics), Kueue's pending workloads, and Slurm's
// pending GPU jobs (every exporter reads the cluster's queue: the most one
// says).
func demandRules(c Config) []Rule {
	src := func(expr, source string) string {
		return fmt.Sprintf(`label_replace(%s, "source", %q, "", "")`, expr, source)
	}
	whole := func(expr string) string {
		return fmt.Sprintf(`label_replace(%s, "resource", %q, "", "")`, expr, names.GPUResourceKSM(names.KindGPU, ""))
	}
	parts := []string{src(`sum by (resource) (
      kube_pod_container_resource_requests{resource=~"nvidia_com_gpu|nvidia_com_mig_.+"}
    * on (namespace, pod) group_left ()
      (max by (namespace, pod) (kube_pod_status_phase{phase="Pending"}) == 1)
  )`, "pods")}
	if c.Demand.KueueClusterQueues != "" {
		parts = append(parts, src(whole(fmt.Sprintf(`sum(kueue_pending_workloads{cluster_queue=~%q}) > 0`, c.Demand.KueueClusterQueues)), "kueue"))
	}
	parts = append(parts, src(whole(fmt.Sprintf("max(%s) > 0", names.SlurmPendingGPUs)), "slurm"))
	return []Rule{
		{Record: names.RecGPUsWantedBySource, Expr: Expr("  " + strings.Join(parts, "\nor\n  ") + "\n")},
		{Record: names.RecGPUsWanted, Expr: Expr(fmt.Sprintf("sum by (resource) (%s)", names.RecGPUsWantedBySource))},
	}
}

// costRules price the owners' and namespaces' idle GPU-hours.
func costRules(c Config) []Rule {
	price := num(c.Cost.PricePerGPUHour)
	return []Rule{
		{Record: names.RecGPUHourPrice, Expr: Expr(fmt.Sprintf(`label_replace(vector(%s), "currency", %q, "", "")`, price, c.Cost.Currency))},
		{Record: names.RecOwnerIdleCost, Expr: Expr(fmt.Sprintf(`label_replace(%s * %s, "currency", %q, "", "")`, names.RecOwnerIdleHours, price, c.Cost.Currency))},
		{Record: names.RecNSIdleCost, Expr: Expr(fmt.Sprintf(`label_replace(%s * %s, "currency", %q, "", "")`, names.RecNSIdleHours, price, c.Cost.Currency))},
	}
}

func (c Config) annotations(anchor, summary, description, dashboard string) map[string]string {
	a := map[string]string{
		"summary":     summary,
		"description": description,
		"runbook_url": c.Links.Runbook + "#" + anchor,
	}
	if c.Links.Grafana != "" && dashboard != "" {
		a["dashboard_url"] = strings.TrimRight(c.Links.Grafana, "/") + dashboard
	}
	return a
}

const (
	unitDashboard  = "/d/" + names.NodeDashboardUID + "/gpureclaim-node-and-gpu?var-node={{ $labels.node }}&var-uuid={{ $labels.uuid }}"
	fleetDashboard = "/d/gpureclaim-fleet/gpureclaim-fleet"
	whoHolds       = `{{ if $labels.pod }}pod {{ $labels.namespace }}/{{ $labels.pod }}{{ else }}user {{ $labels.user }}{{ if $labels.slurm_job }} (Slurm job {{ $labels.slurm_job }}){{ end }}{{ end }}`
	whatUnit       = `{{ if eq $labels.kind "mig" }}MIG {{ $labels.mig_profile }} instance{{ else }}GPU{{ end }} {{ $labels.uuid }} on {{ $labels.node }}`
)

// unitDashboard links a unit alert to the node dashboard, which reads the
// exporter's own metrics: with dcgm-exporter there is none to link to.
func (c Config) unitDashboard() string {
	if c.Source == SourceDCGM {
		return ""
	}
	return unitDashboard
}

// with adds an annotation: idle_for tells the reclaimer how long the unit
// had been idle when the alert started (the lookback).
func with(a map[string]string, k, v string) map[string]string {
	a[k] = v
	return a
}

// suggest adds the action label: evict a pod, cancel a Slurm job, kill a
// bare-metal process,
// only notify for processes the exporter could not attribute (nobody
// knows whose they are, and the node cannot check them). Without
// gpureclaim's exporter no node agent can kill: anything but a pod is
// only notified.
func (c Config) suggest(expr string) string {
	if !c.inputs().kill {
		return fmt.Sprintf(`label_replace(
  label_replace(
    %s,
    "action", "evict", "pod", ".+"),
  "action", "notify", "action", "")`, strings.ReplaceAll(strings.TrimSpace(expr), "\n", "\n    "))
	}
	// A Slurm job is cancelled through Slurm: killing its processes would
	// leave the allocation held, and a batch script may go on.
	return fmt.Sprintf(`label_replace(
  label_replace(
    label_replace(
      label_replace(
        %s,
        "action", "evict", "pod", ".+"),
      "action", "cancel", "slurm_job", ".+"),
    "action", "kill", "action", ""),
  "action", "notify", "user", %q)`, strings.ReplaceAll(strings.TrimSpace(expr), "\n", "\n        "), regexp.QuoteMeta(names.UnattributedUser))
}

// alerts are the unit alerts, once for each audience, and the allocation
// alerts, for people.
func alerts(c Config) []Rule {
	rs := idleAlerts(c)
	rs = append(rs, forEachAudience(alertRules(c))...)
	return append(rs, c.partlyIdle())
}

// idleAlerts are GPUIdle for people and the reclaimer, for each idle class.
func idleAlerts(c Config) []Rule {
	var rs []Rule
	for _, k := range c.idleClasses() {
		sel := `{keep!="true"}`
		labels := map[string]string{"severity": "warning"}
		if k.name != "" {
			sel = fmt.Sprintf(`{%s=%q,keep!="true"}`, names.LabelClass, k.name)
			labels[names.LabelClass] = k.name
		}
		r := Rule{
			Alert:       names.AlertIdle,
			Expr:        Expr(c.suggest(names.RecIdleWhole+sel) + "\n"),
			For:         k.forDur.String(),
			Labels:      labels,
			Annotations: c.idleAnnotations(k, k.forDur),
		}
		for _, a := range forEachAudience([]Rule{r}) {
			if a.Labels[names.LabelAudience] == names.AudienceReclaimer {
				a = reclaimIdle(c, k, a, sel)
			}
			rs = append(rs, a)
		}
	}
	return rs
}

// partlyIdle tells the owner of a pod or a Slurm job that some of its GPUs
// are idle while the others work: nothing is reclaimed (stopping it stops
// the work), so only its owner can give them back. It names no unit: it
// goes to people's routes, by namespace or team, not to the reclaimer.
func (c Config) partlyIdle() Rule {
	total := fmt.Sprintf(`{{ with printf "max(%s{namespace='%%s',pod='%%s',slurm_job='%%s'})" $labels.namespace $labels.pod $labels.slurm_job | query }}{{ . | first | value }}{{ end }}`, names.RecAllocUnits)
	return Rule{
		Alert:  names.AlertPartlyIdle,
		Expr:   Expr(fmt.Sprintf("%s < %s", names.RecAllocIdle, names.RecAllocUnits)),
		For:    c.Idle.PartlyFor.String(),
		Labels: map[string]string{names.LabelAudience: names.AudiencePeople, "severity": "info", "action": "notify"},
		Annotations: c.annotations("gpuallocationpartlyidle",
			whoHolds+` leaves {{ $value }} of its GPUs idle`,
			whoHolds+` holds `+total+` GPUs and {{ $value }} of them have stayed below `+num(c.Idle.Threshold*100)+`% for `+c.Idle.PartlyFor.String()+` while the others work. Nothing is reclaimed: stopping it would stop that work too. Ask for fewer GPUs next time, or spread the work over all of them.`,
			fleetDashboard),
	}
}

func forEachAudience(rs []Rule) []Rule {
	var out []Rule
	for _, r := range rs {
		for _, a := range []string{names.AudiencePeople, names.AudienceReclaimer} {
			c := r
			c.Labels = map[string]string{names.LabelAudience: a}
			for k, v := range r.Labels {
				c.Labels[k] = v
			}
			out = append(out, c)
		}
	}
	return out
}

// pauseRules remember, per owner, when the unit was last busy and how
// long its pauses lasted when its work came back. The last-busy record
// outlives its owner's series by the window, so that a pause during which
// the workload was reclaimed and came back counts too. The pause rule
// reads the last-busy record before this evaluation updates it: a group
// evaluates in order.
func pauseRules(c Config) []Rule {
	var p *Pauses
	for _, k := range c.idleClasses() {
		if k.pauses != nil {
			p = k.pauses // every class's window is the same (validateClasses)
		}
	}
	if p == nil {
		return nil
	}
	busy := fmt.Sprintf("(%s >= %s)", RecActivityLookback(c), num(c.Idle.Threshold))
	return []Rule{
		// Busy at two evaluations in a row is no pause: only gaps longer than the lookback count.
		{Record: names.RecPauseEnded, Expr: Expr(fmt.Sprintf(`  (time() - %s > %d)
and on (%s)
  (%s and on (uuid) %s)
`, names.RecIdleSince, int64(time.Duration(c.Idle.Lookback).Seconds()), ownerKey, names.RecHeld, busy))},
		{Record: names.RecIdleSince, Expr: Expr(fmt.Sprintf(`    (%s * 0 + time()) and on (uuid) %s
  or
    %s > (time() - %d)
  or
    %s * 0 + time()
`, names.RecHeld, busy, names.RecIdleSince, int64(time.Duration(p.Window).Seconds()), names.RecHeld))},
		{Record: names.RecPauseLongest, Expr: Expr(fmt.Sprintf("max_over_time(%s[%s])", names.RecPauseEnded, p.Window))},
	}
}

// idleAnnotations are GPUIdle's, for a class's copy that fires after d.
func (c Config) idleAnnotations(k idleClass, d model.Duration) map[string]string {
	return with(c.annotations("gpuidle",
		`Idle `+whatUnit,
		`The `+whatUnit+` is held by `+whoHolds+` but its {{ $labels.signal }} has stayed below `+num(k.threshold*100)+`% for `+d.String()+` (now {{ $value | humanizePercentage }}).`,
		c.unitDashboard()), "idle_for", c.Idle.Lookback.String())
}

// reclaimIdle is the reclaimer's copy of a class's GPUIdle: it fires after
// the class's reclaim_after and, with pauses, only once the unit has been
// idle beyond its owner's longest recent pause.
func reclaimIdle(c Config, k idleClass, r Rule, sel string) Rule {
	r.For = k.after.String()
	r.Annotations = c.idleAnnotations(k, k.after)
	if p := k.pauses; p != nil {
		r.Expr = Expr(c.suggest(fmt.Sprintf(`  %s%s
unless on (%s)
  (time() - %s < clamp_max(%s * %s, %d))
`, names.RecIdleWhole, sel, ownerKey, names.RecIdleSince, names.RecPauseLongest, num(p.Factor), int64(time.Duration(p.Max).Seconds()))) + "\n")
	}
	return r
}

func alertRules(c Config) []Rule {
	in := c.inputs()
	rs := []Rule{
		{
			Alert: names.AlertWasted,
			Expr: Expr(fmt.Sprintf(`  %s
* on (uuid) group_left (signal)
  (%s < %s)
and on (uuid) (%s >= %s)
unless on (uuid) %s
`, names.RecHeld, names.RecActivityWaste, num(c.Wasted.ActivityBelow), names.RecMemoryRatio, num(c.Wasted.MemoryAbove), names.RecIdleHeld)),
			For:    c.Wasted.For.String(),
			Labels: map[string]string{"severity": "info", "action": "notify"},
			Annotations: c.annotations("gpuwasted",
				`Underused `+whatUnit,
				`The `+whatUnit+` held by `+whoHolds+` averaged {{ $value | humanizePercentage }} {{ $labels.signal }} over `+c.Wasted.Window.String()+` while holding {{ with printf "`+names.RecMemoryRatio+`{uuid='%s'}" $labels.uuid | query }}{{ . | first | value | humanizePercentage }}{{ end }} of its memory.`,
				c.unitDashboard()),
		},
		{
			Alert: names.AlertOvercommitted,
			Expr: Expr(fmt.Sprintf(`(
    label_replace(%s > %s, "reason", "memory", "", "")
  or on (uuid, reason)
    label_replace(%s > %s, "reason", "sm", "", "")
)
* on (uuid) group_left (%s)
  max by (uuid, %s) (%s)
`, names.RecMemoryPressure, num(c.Overcommit.MemoryAbove), names.RecSMSaturation, num(c.Overcommit.ActivityAbove), unitContext, unitContext, in.unitInfo)),
			For:    c.Overcommit.For.String(),
			Labels: map[string]string{"severity": "warning", "action": "notify"},
			Annotations: c.annotations("gpuovercommitted",
				`Overcommitted `+whatUnit,
				`{{ with printf "`+names.RecOwners+`{uuid='%s'}" $labels.uuid | query }}{{ . | first | value }}{{ end }} tenants share the `+whatUnit+` and its {{ if eq $labels.reason "memory" }}memory is {{ $value | humanizePercentage }} used: the next allocation may fail{{ else }}SMs are {{ $value | humanizePercentage }} busy: every tenant is slowed{{ end }}.`,
				c.unitDashboard()),
		},
	}
	if in.rightsizing {
		rs = append(rs, Rule{
			Alert: names.AlertMIGOversized,
			Expr: Expr(fmt.Sprintf(`  label_replace(%s > 0, "suggested_profile", "$1", "profile", "(.*)")
* on (uuid) group_right (suggested_profile)
  (%s unless on (uuid) %s)
`, names.RecRightsizeFreed, names.RecHeld, names.RecIdleHeld)),
			For:    c.MIG.For.String(),
			Labels: map[string]string{"severity": "info", "action": "notify"},
			Annotations: c.annotations("miginstanceoversized",
				`Oversized `+whatUnit,
				`The `+whatUnit+` held by `+whoHolds+` would fit a {{ $labels.suggested_profile }} instance; its peak use over `+c.MIG.PeakWindow.String()+` plus `+num(c.MIG.Headroom*100)+`% headroom leaves {{ $value | humanize1024 }}B unused.`,
				c.unitDashboard()),
		})
	}
	return rs
}

// exporterDown fires when Prometheus cannot scrape a target of the job
// that exports the GPUs.
func (c Config) exporterDown(job string) Rule {
	return Rule{
		Alert:  names.AlertExporterDown,
		Expr:   Expr(fmt.Sprintf(`up{job=%q} == 0`, job)),
		For:    c.Exporter.DownFor.String(),
		Labels: map[string]string{"severity": "warning"},
		Annotations: c.annotations("gpuexporterdown",
			`GPU exporter {{ $labels.instance }} is down`,
			`Prometheus has not scraped {{ $labels.instance }} for `+c.Exporter.DownFor.String()+`: its GPUs are not watched, and none of them can be found idle.`, ""),
	}
}

func exporterRules(c Config) []Rule {
	if c.Source == SourceDCGM {
		// dcgm-exporter reports no health of its own that the rules read:
		// only whether Prometheus reaches it.
		return []Rule{c.exporterDown(c.DCGM.Job)}
	}
	return []Rule{
		c.exporterDown(c.Exporter.Job),
		{
			Alert:  names.AlertCollector,
			Expr:   "gpureclaim_exporter_collector_success == 0",
			For:    c.Exporter.FailingFor.String(),
			Labels: map[string]string{"severity": "warning"},
			Annotations: c.annotations("gpuexportercollectorfailing",
				`GPU exporter {{ $labels.instance }}: collector {{ $labels.collector }} is failing`,
				`The {{ $labels.collector }} part of sampling has failed on {{ $labels.instance }} for `+c.Exporter.FailingFor.String()+`; see gpureclaim_exporter_nvml_errors_total and the exporter's log.`, ""),
		},
		{
			Alert:  names.AlertStale,
			Expr:   Expr(fmt.Sprintf("gpureclaim_exporter_sample_age_seconds > %s", num(time.Duration(c.Exporter.StaleAfter).Seconds()))),
			For:    c.Exporter.DownFor.String(),
			Labels: map[string]string{"severity": "warning"},
			Annotations: c.annotations("gpuexportersamplesstale",
				`GPU exporter {{ $labels.instance }} serves stale samples`,
				`The last sample on {{ $labels.instance }} is {{ $value | humanizeDuration }} old: NVML calls are hanging, so its GPUs' state is unknown.`, ""),
		},
		{
			Alert:  names.AlertGPUUnreadable,
			Expr:   "gpureclaim_gpu_up == 0",
			For:    c.Exporter.FailingFor.String(),
			Labels: map[string]string{"severity": "warning"},
			Annotations: c.annotations("gpuunreadable",
				`GPU {{ $labels.gpu_uuid }} cannot be read`,
				`NVML has failed to read GPU {{ $labels.gpu_uuid }} on {{ $labels.instance }} for `+c.Exporter.FailingFor.String()+` (a GPU that fell off the bus reads ERROR_GPU_IS_LOST); see gpureclaim_exporter_nvml_errors_total.`, ""),
		},
	}
}
