package dashboards

import "github.com/gpureclaim/gpureclaim/internal/names"

// unitJoin adds the unit's node, index and MIG profile to a per-unit series,
// and keeps only the chosen node and units.
func unitJoin(expr string) string {
	return expr + ` * on (` + names.LabelCluster + `, uuid) group_left (node, gpu_index, mig_profile) max by (` + names.LabelCluster + `, uuid, node, gpu_index, mig_profile) (gpureclaim_unit_info{node=~"$node", uuid=~"$uuid"})`
}

// gpuJoin does the same for a per-GPU series.
func gpuJoin(expr string) string {
	return expr + ` * on (` + names.LabelCluster + `, gpu_uuid) group_left (node, gpu_index) max by (` + names.LabelCluster + `, gpu_uuid, node, gpu_index) (gpureclaim_gpu_info{node=~"$node"})`
}

const unitLegend = "GPU {{gpu_index}} {{mig_profile}} {{uuid}}"

// node is the node and GPU dashboard: what each unit on a node does, who
// holds it, and how the exporter is doing.
func node() *layout {
	l := newLayout(NodeUID, "gpureclaim / Node and GPU",
		"What each GPU and MIG instance on a node does, who holds it, and how its exporter is doing.")
	l.row("Activity")
	add(l, series("SM activity", "Share of SM cycles with work resident (GPM, Hopper and newer): the idle signal.", "percentunit",
		Target{Expr: unitJoin("gpureclaim_unit_sm_active_ratio"), LegendFormat: unitLegend}), 12, 8)
	add(l, series("Activity the rules use", "SM activity where the GPU has GPM, utilization otherwise; the legend says which.", "percentunit",
		Target{Expr: unitJoin(names.RecActivity), LegendFormat: unitLegend + " ({{signal}})"}), 12, 8)
	add(l, series("SM occupancy", "Resident warps as a share of the SMs' maximum (GPM).", "percentunit",
		Target{Expr: unitJoin("gpureclaim_unit_sm_occupancy_ratio"), LegendFormat: unitLegend}), 8, 8)
	add(l, series("DRAM bandwidth", "Share of peak DRAM bandwidth in use (GPM).", "percentunit",
		Target{Expr: unitJoin("gpureclaim_unit_dram_bandwidth_ratio"), LegendFormat: unitLegend}), 8, 8)
	add(l, series("Tensor activity", "Share of cycles any tensor pipe was active (GPM).", "percentunit",
		Target{Expr: unitJoin("gpureclaim_unit_tensor_active_ratio"), LegendFormat: unitLegend}), 8, 8)
	add(l, series("Utilization", "Share of time any kernel ran (NVML): one polling kernel reads 100%. Compare with SM activity.", "percentunit",
		Target{Expr: unitJoin("gpureclaim_unit_utilization_ratio"), LegendFormat: unitLegend}), 12, 8)
	add(l, series("Memory controller busy", "Share of time device memory was read or written (NVML).", "percentunit",
		Target{Expr: unitJoin("gpureclaim_unit_memory_controller_busy_ratio"), LegendFormat: unitLegend}), 12, 8)

	l.row("Memory")
	add(l, series("Memory used", "Device memory allocated on each unit.", "bytes",
		Target{Expr: unitJoin("gpureclaim_unit_memory_used_bytes"), LegendFormat: unitLegend}), 12, 8)
	add(l, series("Memory used, share", "Device memory allocated as a share of the unit's.", "percentunit",
		Target{Expr: unitJoin(names.RecMemoryRatio), LegendFormat: unitLegend}), 12, 8)

	l.row("Power")
	add(l, series("Power", "Power drawn by each GPU.", "watt",
		Target{Expr: gpuJoin("gpureclaim_gpu_power_watts"), LegendFormat: "GPU {{gpu_index}}"}), 8, 8)
	add(l, series("Average power from the energy counter", "Energy used per second, averaged over the rate interval.", "watt",
		Target{Expr: gpuJoin("rate(gpureclaim_gpu_energy_joules_total[$__rate_interval])"), LegendFormat: "GPU {{gpu_index}}"}), 8, 8)
	add(l, series("Temperature", "GPU die temperature.", "celsius",
		Target{Expr: gpuJoin("gpureclaim_gpu_temperature_celsius"), LegendFormat: "GPU {{gpu_index}}"}), 8, 8)

	l.row("Who holds what")
	add(l, tablePanel("Owners and their memory", "Each unit's owners (a pod's container, or a Unix user and Slurm job) and the memory they hold.", "bytes",
		Target{Expr: `max by (` + names.LabelCluster + `, node, gpu_index, mig_profile, uuid, namespace, pod, container, user, slurm_job) (` + unitJoin("gpureclaim_unit_owner_memory_used_bytes") + `)`}), 24, 9)
	add(l, tablePanel("MIG instances", "MIG instances on the node: profile, GPU and compute instance ids, compute slices (the value).", "none",
		Target{Expr: `max by (` + names.LabelCluster + `, node, gpu_index, uuid, profile, gpu_instance_id, compute_instance_id) (gpureclaim_mig_instance_slices * on (` + names.LabelCluster + `, uuid) group_left (profile, gpu_instance_id, compute_instance_id) gpureclaim_mig_instance_info` + ` * on (` + names.LabelCluster + `, uuid) group_left (node, gpu_index) max by (` + names.LabelCluster + `, uuid, node, gpu_index) (gpureclaim_unit_info{node=~"$node", uuid=~"$uuid"}))`}), 12, 8)
	add(l, series("MPS tenants", "Processes running as MPS clients on each GPU; an MPS GPU with several tenants can be overcommitted.", "short",
		Target{Expr: gpuJoin("gpureclaim_gpu_mps_clients"), LegendFormat: "GPU {{gpu_index}}"}), 12, 8)

	l.row("Exporter")
	add(l, series("Collector success", "1 when the part of sampling succeeded on every GPU.", "bool",
		Target{Expr: `gpureclaim_exporter_collector_success * on (` + names.LabelCluster + `, instance) group_left (node) max by (` + names.LabelCluster + `, instance, node) (gpureclaim_driver_info{node=~"$node"})`, LegendFormat: "{{node}} {{collector}}"}), 8, 7)
	add(l, series("Sample age", "Time since the exporter last read NVML; scrapes serve that sample.", "s",
		Target{Expr: `gpureclaim_exporter_sample_age_seconds * on (` + names.LabelCluster + `, instance) group_left (node) max by (` + names.LabelCluster + `, instance, node) (gpureclaim_driver_info{node=~"$node"})`, LegendFormat: "{{node}}"}), 8, 7)
	add(l, series("NVML errors", "Failed NVML calls per second, by call and return code.", "reqps",
		Target{Expr: `sum by (` + names.LabelCluster + `, node, call, error) (rate(gpureclaim_exporter_nvml_errors_total[$__rate_interval]) * on (` + names.LabelCluster + `, instance) group_left (node) max by (` + names.LabelCluster + `, instance, node) (gpureclaim_driver_info{node=~"$node"})) or vector(0)`, LegendFormat: "{{node}} {{call}} {{error}}"}), 8, 7)

	l.b.WithVariable(queryVar("node", "Node", `label_values(gpureclaim_unit_info{cluster=~"$cluster"}, node)`))
	l.b.WithVariable(queryVar("uuid", "Unit", `label_values(gpureclaim_unit_info{cluster=~"$cluster",node=~"$node"}, uuid)`))
	return l
}
