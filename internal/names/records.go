package names

// Recording rules the rules generator writes and the alerts, the dashboards
// and the tests read.
const (
	RecActivity      = "uuid:gpureclaim_unit_activity:ratio"
	RecActivityWaste = "uuid:gpureclaim_unit_activity:avg_waste_window"
	RecActivityPeak  = "uuid:gpureclaim_unit_activity:max_peak_window"
	RecMemoryRatio   = "uuid:gpureclaim_unit_memory_used:ratio"
	RecMemoryPeak    = "uuid:gpureclaim_unit_memory_used_bytes:max_peak_window"
	RecSize          = "uuid:gpureclaim_unit_size:gpus"
	RecOwners        = "uuid:gpureclaim_unit_owners:count"
	RecHeld          = "uuid_owner:gpureclaim_unit_held:info"
	RecOwnerClass    = "uuid_owner:gpureclaim_unit_class:info"
	// RecGPUsWanted and RecGPUsWantedBySource are the GPUs pending work
	// asks for, by resource as kube-state-metrics names it
	// (GPUResourceKSM), and by where the demand comes from.
	RecGPUsWanted = "resource:gpureclaim_gpus_wanted:sum"
	// RecGPUHourPrice is the rules' price of a GPU-hour, with its currency
	// label: one source for the dashboards and the reclaimer's report.
	RecGPUHourPrice       = "fleet:gpureclaim_gpu_hour_price:config"
	RecGPUsWantedBySource = "resource_source:gpureclaim_gpus_wanted:sum"
	RecIdleHeld           = "uuid_owner:gpureclaim_unit_idle_held:activity"
	RecIdleHeldGPUs       = "uuid_owner:gpureclaim_unit_idle_held:gpus"
	// A pod's or a Slurm job's allocation: the units it holds, those idle,
	// and the idle units whose whole allocation is idle (only those can be
	// reclaimed: stopping the pod or the job stops the busy ones too).
	RecAllocUnits   = "owner:gpureclaim_allocation_units:count"
	RecAllocIdle    = "owner:gpureclaim_allocation_idle_units:count"
	RecIdleWhole    = "uuid_owner:gpureclaim_unit_idle_whole:activity"
	RecPauseEnded   = "uuid_owner:gpureclaim_unit_pause:seconds"
	RecIdleSince    = "uuid_owner:gpureclaim_unit_idle_since_timestamp:seconds"
	RecPauseLongest = "uuid_owner:gpureclaim_unit_pause_seconds:max_pauses_window"
	// Quiet: whether a held unit is busy, the units a namespace holds,
	// and the busy share of the most it held in the last day over the
	// quiet window.
	RecOwnerBusy       = "uuid_owner:gpureclaim_unit_busy:bool"
	RecNamespaceHeld   = "namespace:gpureclaim_units_held:count"
	RecNamespaceBusy   = "namespace:gpureclaim_unit_busy:ratio_quiet_window"
	RecWastedMemory    = "uuid:gpureclaim_unit_wasted_memory:bytes"
	RecMemoryPressure  = "uuid:gpureclaim_unit_memory_pressure:ratio"
	RecSMSaturation    = "uuid:gpureclaim_unit_sm_saturation:ratio"
	RecRightsizeScore  = "uuid:gpureclaim_mig_rightsize_candidate:score"
	RecRightsizeMemory = "uuid:gpureclaim_mig_rightsize_memory:bytes"
	RecRightsizeFreed  = "uuid:gpureclaim_mig_rightsize_freed:bytes"
	// Packing: a whole GPU's one owner, its use over the packing window,
	// and the share of a GPU it needs.
	RecOwnerActivity  = "uuid_owner:gpureclaim_unit_activity:ratio"
	RecOwnerMemory    = "uuid_owner:gpureclaim_unit_memory_used:bytes"
	RecPackActivity   = "uuid_owner:gpureclaim_unit_activity:quantile_packing_window"
	RecPackMemory     = "uuid_owner:gpureclaim_unit_memory_used_bytes:max_packing_window"
	RecPackHeld       = "uuid_owner:gpureclaim_unit_held:seconds_packing_window"
	RecPackNeed       = "uuid_owner:gpureclaim_packing_need:ratio"
	RecPackMIGFit     = "uuid_owner:gpureclaim_packing_mig_fit:slices"
	RecFleetPackFreed = "fleet:gpureclaim_packing_freed:gpus"
	RecFleetTotal     = "fleet:gpureclaim_gpus:total"
	RecFleetHeld      = "fleet:gpureclaim_gpus:held"
	RecFleetUsed      = "fleet:gpureclaim_gpus:used"
	RecFleetIdleHeld  = "fleet:gpureclaim_gpus:idle_held"
	RecFleetEffective = "fleet:gpureclaim_effective_utilization:ratio"
	RecFleetMIGFreed  = "fleet:gpureclaim_mig_rightsize_freed:bytes"
	RecOwnerIdle      = "owner:gpureclaim_gpus_idle_held:sum"
	RecNamespaceIdle  = "namespace:gpureclaim_gpus_idle_held:sum"
	RecOwnerIdleHours = "owner:gpureclaim_idle_gpu_hours:cost_window"
	RecNSIdleHours    = "namespace:gpureclaim_idle_gpu_hours:cost_window"
	RecOwnerIdleCost  = "owner:gpureclaim_idle_cost:cost_window"
	RecNSIdleCost     = "namespace:gpureclaim_idle_cost:cost_window"

	// With sharded rules, each shard's group sums its units into these, and
	// the fleet group sums the shards: it reads a series a shard, not one a
	// unit.
	RecShardTotal          = "shard:gpureclaim_gpus:total"
	RecShardHeld           = "shard:gpureclaim_gpus:held"
	RecShardUsed           = "shard:gpureclaim_gpus:used"
	RecShardIdleHeld       = "shard:gpureclaim_gpus:idle_held"
	RecShardMIGFreed       = "shard:gpureclaim_mig_rightsize_freed:bytes"
	RecShardOwnerIdle      = "shard_owner:gpureclaim_gpus_idle_held:sum"
	RecShardOwnerIdleHours = "shard_owner:gpureclaim_idle_gpu_hours:cost_window"
	RecShardNSBusy         = "shard_namespace:gpureclaim_unit_busy:sum_quiet_window"
	RecShardNSHeld         = "shard_namespace:gpureclaim_units_held:count"
)

// PackableNeed is the share of a GPU at or under which a whole GPU's one
// owner is packable (GPUPackable): it leaves room for another like it.
const PackableNeed = 0.5

// The caps a shared GPU is planned within, the same for the packing rules
// and the advisor: summed activity up to the GPU's capacity (a duty cycle
// cannot pass it; work over it waits its turn), summed memory up to
// PackMemoryCap of the GPU's, each workload's memory peak with
// PackHeadroom.
const (
	PackComputeCap = 1.0
	PackMemoryCap  = 0.95
	PackHeadroom   = 0.1
)
