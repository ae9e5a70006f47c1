package dashboards

import (
	"fmt"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

const alertsOfUnits = `alertname=~"` + names.AlertIdle + "|" + names.AlertWasted + "|" + names.AlertOvercommitted + "|" + names.AlertMIGOversized + "|" + names.AlertPackable + "|" + names.AlertPartlyIdle + `"`

// sum adds a fleet record up over the clusters picked.
func sum(rec string) string { return "sum(" + rec + ")" }

// effective is the effective utilization of the clusters picked: their
// work over their capacity held, not an average of their ratios.
var effective = "sum(" + names.RecFleetUsed + ") / (sum(" + names.RecFleetHeld + ") > 0)"

// fleet is the fleet dashboard: how much of what is held is used, what is
// idle, wasted or overcommitted now, what idleness costs, what right-sizing
// MIG instances would free.
func fleet() *layout {
	l := newLayout(FleetUID, "gpureclaim / Fleet",
		"How much of the GPUs held is used; what is idle, wasted or overcommitted; what it costs.")
	l.row("Now")
	add(l, statPanel("Effective utilization", "Work done over capacity held, weighted by unit size (a 1g MIG slice counts as 1/7 of a GPU), over the clusters picked.", "percentunit", effective), 4, 5)
	add(l, statPanel("GPUs held", "GPUs (and MIG slices, by size) held by a pod or process.", "short", sum(names.RecFleetHeld)), 4, 5)
	add(l, statPanel("GPUs in the fleet", "Every GPU the exporters see, MIG slices by size.", "short", sum(names.RecFleetTotal)), 4, 5)
	add(l, statPanel("Held but idle", "GPUs held whose activity is below the idle threshold now.", "short", sum(names.RecFleetIdleHeld)), 4, 5)
	add(l, statPanel("Wasted units", "Units held with low average activity and most of their memory (GPUWasted firing).", "short", `count(ALERTS{alertname="`+names.AlertWasted+`",alertstate="firing",`+names.LabelAudience+`="`+names.AudiencePeople+`"}) or vector(0)`), 4, 5)
	add(l, statPanel("Overcommitted units", "Shared units near out-of-memory or SM saturation (GPUOvercommitted firing).", "short", `count(count by (`+names.LabelCluster+`, uuid) (ALERTS{alertname="`+names.AlertOvercommitted+`",alertstate="firing",`+names.LabelAudience+`="`+names.AudiencePeople+`"})) or vector(0)`), 4, 5)

	l.row("Over time")
	add(l, series("Effective utilization", "Work done over capacity held. Fleets typically sit at 30-40%; packing and idle reclaim lift them to 60-80%.", "percentunit",
		Target{Expr: effective, LegendFormat: "effective utilization"}), 12, 8)
	add(l, series("Held, used and idle GPUs", "Capacity held, work done (GPUs' worth of activity), and capacity held but idle.", "short",
		Target{Expr: sum(names.RecFleetTotal), LegendFormat: "in the fleet"},
		Target{Expr: sum(names.RecFleetHeld), LegendFormat: "held"},
		Target{Expr: sum(names.RecFleetUsed), LegendFormat: "used"},
		Target{Expr: sum(names.RecFleetIdleHeld), LegendFormat: "held but idle"}), 12, 8)
	add(l, series("GPUs wanted beside idle supply", "GPUs pending work asks for (pending pods' requests, Kueue's pending workloads, Slurm's pending GPU jobs) against GPUs held but idle: idle GPUs while work waits are what demand-aware policies reclaim first.", "short",
		Target{Expr: "sum(" + names.RecGPUsWanted + ") or vector(0)", LegendFormat: "wanted by pending work"},
		Target{Expr: sum(names.RecFleetIdleHeld), LegendFormat: "held but idle"}), 24, 8)

	l.row("By cluster")
	add(l, series("Idle GPUs by cluster", "GPUs held but idle, per cluster (the cluster label: each cluster's Prometheus external_labels).", "short",
		Target{Expr: "sum by (" + names.LabelCluster + ") (" + names.RecFleetIdleHeld + ")", LegendFormat: "{{" + names.LabelCluster + "}}"}), 8, 8)
	add(l, tablePanel("Idle cost by cluster", "Idle GPU-hours over the rules' cost window times the price per GPU-hour, per cluster, in the rules' currency (the currency column).", "short",
		Target{Expr: "sort_desc(sum by (" + names.LabelCluster + ", currency) (" + names.RecNSIdleCost + "))"}), 8, 8)
	add(l, tablePanel("GPUs reclaimed by cluster", "GPUs each cluster's reclaimer freed in the time range, MIG instances by their share.", "short",
		Target{Expr: "sort_desc(sum by (" + names.LabelCluster + ") (increase(gpureclaim_reclaimer_reclaimed_gpus_total[$__range])))"}), 8, 8)

	l.row("Idle time and its cost")
	add(l, series("Idle GPUs by namespace", "GPUs held but idle, per namespace (empty: bare metal).", "short",
		Target{Expr: names.RecNamespaceIdle, LegendFormat: "{{namespace}}"}), 12, 8)
	add(l, tablePanel("Idle GPU-hours by namespace", "GPU-hours held but idle over the rules' cost window (1 day by default).", "h",
		Target{Expr: "sort_desc(" + names.RecNSIdleHours + ")"}), 6, 8)
	add(l, tablePanel("Idle cost by namespace", "Idle GPU-hours times the rules' price per GPU-hour, in the rules' currency (the currency column).", "short",
		Target{Expr: "sort_desc(" + names.RecNSIdleCost + ")"}), 6, 8)
	add(l, tablePanel("Idle GPU-hours by owner", "Per pod, or per Unix user and Slurm job on bare metal.", "h",
		Target{Expr: "sort_desc(" + names.RecOwnerIdleHours + ")"}), 12, 8)
	add(l, tablePanel("Idle cost by owner", "Per pod, or per Unix user and Slurm job on bare metal, in the rules' currency (the currency column).", "short",
		Target{Expr: "sort_desc(" + names.RecOwnerIdleCost + ")"}), 12, 8)

	l.row("MIG right-sizing")
	add(l, statPanel("Memory right-sizing would free", "Memory of MIG instances beyond the smallest profile that fits their peak use.", "bytes", sum(names.RecFleetMIGFreed)), 6, 8)
	add(l, tablePanel("Oversized MIG instances", "Each instance's suggested profile (the profile label) and the memory it would free.", "bytes",
		Target{Expr: `(` + names.RecRightsizeFreed + ` > 0) * on (` + names.LabelCluster + `, uuid) group_left (node, mig_profile) max by (` + names.LabelCluster + `, uuid, node, mig_profile) (gpureclaim_unit_info)`}), 18, 8)

	l.row("Packing")
	add(l, statPanel("GPUs a packing plan would free", "Whole GPUs whose one owner needs at most half a GPU over the packing window (GPUPackable), less the GPUs their summed needs fill: an upper bound. gpureclaim-advisor plans on the series and replays the plan.", "short", sum(names.RecFleetPackFreed)), 6, 8)
	add(l, tablePanel("Owners who could share a GPU", "The share of a GPU each owner needs over the packing window, and whether compute or memory binds; 50% or less is packable.", "percentunit",
		Target{Expr: fmt.Sprintf("sort(%s <= %g)", names.RecPackNeed, names.PackableNeed)}), 18, 8)

	l.row("Alerts")
	add(l, tablePanel("Units that need attention", "Firing gpureclaim alerts on units, with their owners and suggested actions.", "none",
		Target{Expr: `ALERTS{alertstate="firing",` + names.LabelAudience + `="` + names.AudiencePeople + `",` + alertsOfUnits + `}`}), 24, 8)
	return l
}
