package dashboards

const alertsOfUnits = `alertname=~"GPUIdle|GPUWasted|GPUOvercommitted|MIGInstanceOversized"`

// Fleet is the fleet dashboard: how much of what is held is used, what is
// idle, wasted or overcommitted now, what idleness costs, what right-sizing
// MIG instances would free.
func Fleet() Dashboard {
	l := &layout{}
	l.row("Now")
	l.add(stat("Effective utilization", "Work done over capacity held, weighted by unit size (a 1g MIG slice counts as 1/7 of a GPU).", "percentunit", "fleet:gpureclaim_effective_utilization:ratio"), 4, 5)
	l.add(stat("GPUs held", "GPUs (and MIG slices, by size) held by a pod or process.", "short", "fleet:gpureclaim_gpus:held"), 4, 5)
	l.add(stat("GPUs in the fleet", "Every GPU the exporters see, MIG slices by size.", "short", "fleet:gpureclaim_gpus:total"), 4, 5)
	l.add(stat("Held but idle", "GPUs held whose activity is below the idle threshold now.", "short", "fleet:gpureclaim_gpus:idle_held"), 4, 5)
	l.add(stat("Wasted units", "Units held with low average activity and most of their memory (GPUWasted firing).", "short", `count(ALERTS{alertname="GPUWasted",alertstate="firing",audience="people"}) or vector(0)`), 4, 5)
	l.add(stat("Overcommitted units", "Shared units near out-of-memory or SM saturation (GPUOvercommitted firing).", "short", `count(count by (uuid) (ALERTS{alertname="GPUOvercommitted",alertstate="firing",audience="people"})) or vector(0)`), 4, 5)

	l.row("Over time")
	l.add(series("Effective utilization", "Work done over capacity held. Fleets typically sit at 30-40%; packing and idle reclaim lift them to 60-80%.", "percentunit",
		Target{Expr: "fleet:gpureclaim_effective_utilization:ratio", LegendFormat: "effective utilization"}), 12, 8)
	l.add(series("Held, used and idle GPUs", "Capacity held, work done (GPUs' worth of activity), and capacity held but idle.", "short",
		Target{Expr: "fleet:gpureclaim_gpus:total", LegendFormat: "in the fleet"},
		Target{Expr: "fleet:gpureclaim_gpus:held", LegendFormat: "held"},
		Target{Expr: "fleet:gpureclaim_gpus:used", LegendFormat: "used"},
		Target{Expr: "fleet:gpureclaim_gpus:idle_held", LegendFormat: "held but idle"}), 12, 8)

	l.row("Idle time and its cost")
	l.add(series("Idle GPUs by namespace", "GPUs held but idle, per namespace (empty: bare metal).", "short",
		Target{Expr: "namespace:gpureclaim_gpus_idle_held:sum", LegendFormat: "{{namespace}}"}), 12, 8)
	l.add(table("Idle GPU-hours by namespace", "GPU-hours held but idle over the rules' cost window (1 day by default).", "h",
		Target{Expr: "sort_desc(namespace:gpureclaim_idle_gpu_hours:cost_window)"}), 6, 8)
	l.add(table("Idle cost by namespace", "Idle GPU-hours times the configured price per GPU-hour.", "currencyUSD",
		Target{Expr: "sort_desc(namespace:gpureclaim_idle_cost:cost_window)"}), 6, 8)
	l.add(table("Idle GPU-hours by owner", "Per pod, or per Unix user and Slurm job on bare metal.", "h",
		Target{Expr: "sort_desc(owner:gpureclaim_idle_gpu_hours:cost_window)"}), 12, 8)
	l.add(table("Idle cost by owner", "Per pod, or per Unix user and Slurm job on bare metal.", "currencyUSD",
		Target{Expr: "sort_desc(owner:gpureclaim_idle_cost:cost_window)"}), 12, 8)

	l.row("MIG right-sizing")
	l.add(stat("Memory right-sizing would free", "Memory of MIG instances beyond the smallest profile that fits their peak use.", "bytes", "fleet:gpureclaim_mig_rightsize_freed:bytes"), 6, 8)
	l.add(table("Oversized MIG instances", "Each instance's suggested profile (the profile label) and the memory it would free.", "bytes",
		Target{Expr: `(uuid:gpureclaim_mig_rightsize_freed:bytes > 0) * on (uuid) group_left (node, mig_profile) max by (uuid, node, mig_profile) (gpureclaim_unit_info)`}), 18, 8)

	l.row("Alerts")
	l.add(table("Units that need attention", "Firing gpureclaim alerts on units, with their owners and suggested actions.", "none",
		Target{Expr: `ALERTS{alertstate="firing",audience="people",` + alertsOfUnits + `}`}), 24, 8)
	return base("gpureclaim-fleet", "gpureclaim / Fleet", "How much of the GPUs held is used; what is idle, wasted or overcommitted; what it costs.", nil, l.panels)
}
