package names

// Alerts the rules raise and the reclaimer, the dashboards and the backtest
// read.
const (
	AlertIdle          = "GPUIdle"
	AlertWasted        = "GPUWasted"
	AlertOvercommitted = "GPUOvercommitted"
	AlertMIGOversized  = "MIGInstanceOversized"
	AlertPackable      = "GPUPackable"
	AlertPartlyIdle    = "GPUAllocationPartlyIdle"
	AlertExporterDown  = "GPUExporterDown"
	AlertCollector     = "GPUExporterCollectorFailing"
	AlertStale         = "GPUExporterSamplesStale"
	AlertGPUUnreadable = "GPUUnreadable"
)

// LabelAudience labels each unit alert with who it is for: it comes twice,
// for people (routed to teams) and for the reclaimer (routed to its
// webhook), so that a snooze, an Alertmanager silence on the reclaimer's
// copy, mutes nobody else.
const (
	LabelAudience     = "audience"
	AudiencePeople    = "people"
	AudienceReclaimer = "reclaimer"
)

// Labels of the exporter's unit series that the rules keep on every alert
// and the reclaimer reads as the target and its owner.
const (
	LabelUUID    = "uuid"             // the unit: a GPU's UUID or a MIG instance's
	LabelGPUUUID = "gpu_uuid"         // the GPU the unit is on
	LabelShard   = "gpureclaim_shard" // with sharded rules: a target's shard (scrape relabeling), and the group that computed a record
	// LabelCluster is the default label that names a series' cluster in a
	// fleet of several (Prometheus external_labels, or a scrape relabel):
	// the rules keep it in every aggregation, and a reclaimer acts only on
	// the alerts of its own.
	LabelCluster    = "cluster"
	LabelNode       = "node"
	LabelKind       = "kind" // KindGPU or KindMIG
	LabelMIGProfile = "mig_profile"
	LabelNamespace  = "namespace"
	LabelPod        = "pod"
	LabelContainer  = "container"
	LabelUser       = "user"
	LabelSlurmJob   = "slurm_job"
	// LabelAction is the action the rules suggest for an idle unit.
	LabelAction = "action"
	// LabelKeep marks a unit whose owner asked to keep it.
	LabelKeep = "keep"
	// LabelClaimNamespace and LabelClaim name the ResourceClaim a pod holds
	// a unit through, where a DRA driver allocated it.
	LabelClaimNamespace = "claim_namespace"
	LabelClaim          = "claim"
	// LabelSignal names the activity an idle alert judged by.
	LabelSignal = "signal"
	// LabelClass names the idle class of the holder (rules: idle.classes).
	LabelClass = "class"
)

// Values of LabelSignal.
const (
	SignalSMActive    = "sm_active"   // the unit's GPM SM activity
	SignalUtilization = "utilization" // the unit's NVML utilization (duty cycle)
	// SignalHolder is one holder's own share of a shared unit's SM time
	// (NVML per-process utilization), or no process at all, while the
	// unit is busy with the others' work: that holder is idle, the unit
	// is not, and stopping it frees its share only.
	SignalHolder = "holder_sm_utilization"
)

// Values of LabelKind.
const (
	KindGPU = "gpu" // a whole GPU
	KindMIG = "mig" // a MIG instance
)

// Kinds lists the values of LabelKind.
var Kinds = []string{KindGPU, KindMIG}
