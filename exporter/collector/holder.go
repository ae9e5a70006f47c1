package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Holder exports who holds each unit. A holder is a pod's container
// (namespace, pod, container) or, outside Kubernetes, a Unix user and Slurm
// job; the labels that do not apply are empty (the metrics say owner: their
// names predate the word, and the rules and dashboards read them). PIDs are never labels: they
// churn, and the reclaimer asks the node for them when it acts.
type Holder struct {
	src                                            Source
	info, memory, smUtil, procs, started, slurmJob *prometheus.Desc
	slurmPending, draUnresolved                    *prometheus.Desc
}

var ownerLabels = []string{names.LabelUUID, names.LabelGPUUUID, names.LabelNamespace, names.LabelPod, names.LabelContainer, names.LabelUser, names.LabelSlurmJob}

// NewHolder returns the holder collector.
func NewHolder(src Source) *Holder {
	return &Holder{
		src: src,
		info: desc("gpureclaim_unit_owner_info", "Who holds the unit: a pod the device plugin or a DRA driver allocated it to (claim_namespace and claim name the ResourceClaim), a Slurm job slurmctld allocated it to, or the owner of a process on it; always 1. keep is \"true\" when the pod is marked gpureclaim.io/keep or the job's comment says gpureclaim:keep.",
			append(ownerLabels, "keep", names.LabelClaimNamespace, names.LabelClaim)...),
		memory: desc("gpureclaim_unit_owner_memory_used_bytes", "Device memory held by the owner's processes on the unit.", ownerLabels...),
		smUtil: desc("gpureclaim_unit_owner_sm_utilization_ratio", "The owner's processes' share of the unit's SM time (NVML per-process utilization; not on MIG).", ownerLabels...),
		procs:  desc("gpureclaim_unit_owner_processes", "The owner's processes on the unit.", ownerLabels...),
		started: desc("gpureclaim_unit_owner_start_time_seconds",
			"Start of the owner's oldest process on the unit, or of a Slurm job's allocation, in Unix seconds; absent while neither is known.", ownerLabels...),
		slurmJob: desc("gpureclaim_slurm_job_info", "A Slurm job holding GPUs on the node by allocation; always 1. batch is \"true\" for sbatch jobs, requeue when Slurm may requeue it.",
			names.LabelSlurmJob, names.LabelUser, "partition", "batch", "requeue"),
		draUnresolved: prometheus.NewDesc("gpureclaim_dra_unresolved_devices", "DRA devices the kubelet reports allocated that resolve to no unit of the node (a name no GPU or MIG instance matches, no uuid in its ResourceSlice): their holders are not attributed; each is logged once.", nil, nil),
		slurmPending:  prometheus.NewDesc(names.SlurmPendingGPUs, "GPUs the cluster's pending Slurm jobs ask for (per node times their nodes, and per job); every node reads the same queue.", nil, nil),
	}
}

func (c *Holder) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.memory, c.smUtil, c.procs, c.started, c.slurmJob, c.slurmPending, c.draUnresolved} {
		ch <- d
	}
}

func (c *Holder) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Latest()
	if s == nil {
		return
	}
	emit(ch, c.slurmPending, s.SlurmPendingGPUs)
	emit(ch, c.draUnresolved, s.DRAUnresolved)
	for _, j := range s.SlurmJobs {
		gauge(ch, c.slurmJob, 1, j.ID, j.User, j.Partition, strconv.FormatBool(j.Batch), strconv.FormatBool(j.Requeue))
	}
	for i := range s.GPUs {
		for j := range s.GPUs[i].Units {
			u := &s.GPUs[i].Units[j]
			for k := range u.Holders {
				o := &u.Holders[k]
				l := []string{u.UUID, u.GPUUUID, o.Namespace, o.Pod, o.Container, o.User, o.SlurmJob}
				keep := "false"
				if o.Keep {
					keep = "true"
				}
				gauge(ch, c.info, 1, append(l, keep, o.Claim.Namespace, o.Claim.Name)...)
				gauge(ch, c.memory, float64(o.MemoryUsed), l...)
				emit(ch, c.smUtil, o.SMUtil, l...)
				gauge(ch, c.procs, float64(o.Processes), l...)
				if !o.StartTime.IsZero() {
					gauge(ch, c.started, float64(o.StartTime.Unix()), l...)
				}
			}
		}
	}
}
