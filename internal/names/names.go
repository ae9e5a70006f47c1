// Package names holds the names more than one part of gpureclaim reads or
// writes, so that each lives in one place. It depends on nothing.
package names

import (
	"fmt"
	"strings"
)

// UnattributedUser is the owner user of the processes NVML lists on a unit
// that the exporter's /proc cannot place (no process attribution, or a PID
// namespace of its own): the unit is held, by someone unknown. It is not a
// valid Unix user name, so it never stands for a real one.
const UnattributedUser = "(unattributed)"

// IdleThreshold is the default activity (SM activity, else utilization)
// under which a unit is idle: the rules' idle threshold, the node's check
// before a kill, and the backtest's measure of returning work. The node's
// check must never be below the rules' threshold, or it refuses the kills
// the rules ask for.
const IdleThreshold = 0.05

// ExporterJob is the default Prometheus job that scrapes the exporters: the
// rules select it, and the chart and the local stack name their scrape so.
const ExporterJob = "gpureclaim-exporter"

// NodeDashboardUID is the uid of the node and GPU dashboard, which the
// alerts link to.
const NodeDashboardUID = "gpureclaim-node"

// UnitOwnerInfo is the exporter's series of who holds a unit: the
// reclaimer reads it to confirm a released GPU.
const UnitOwnerInfo = "gpureclaim_unit_owner_info"

// SharedGPUResource is the extended resource a shared GPU is requested by
// under the NVIDIA device plugin's sharing (time-slicing, or MPS, with
// renameByDefault): what the advisor and GPUPackable tell an owner to ask for.
const SharedGPUResource = "nvidia.com/gpu.shared"

// DRADrivers are the DRA drivers whose devices the exporter reads from the
// kubelet unless told others: NVIDIA's GPU driver (kubernetes-sigs/
// dra-driver-nvidia-gpu), which names a GPU gpu-<minor> and a MIG device
// gpu-<parent minor>-mig-<profile>-<GI profile id>-<placement start>.
var DRADrivers = []string{"gpu.nvidia.com"}

// DRAGPUName is the name NVIDIA's DRA driver gives a whole GPU.
func DRAGPUName(minor int) string { return fmt.Sprintf("gpu-%d", minor) }

// DRAMIGName is the name NVIDIA's DRA driver gives a MIG device: its
// parent's minor number, its profile without the dot ("1g10gb"), its GPU
// instance profile id and the start of its placement.
func DRAMIGName(minor int, profile string, profileID, placementStart int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", minor, strings.ReplaceAll(profile, ".", ""), profileID, placementStart)
}

// SlurmPendingGPUs is the exporter's count of the GPUs Slurm's pending
// jobs ask for, cluster-wide.
const SlurmPendingGPUs = "gpureclaim_slurm_pending_gpus"

// GPUResourceKSM is the resource a unit of the kind is requested by, as
// kube-state-metrics names resources (nvidia_com_gpu,
// nvidia_com_mig_1g_10gb): what pending work asking for one requests.
// A profile that came in an alert's labels cannot leave the string it is
// put in (KSMName).
func GPUResourceKSM(kind, migProfile string) string {
	if kind == KindMIG && migProfile != "" {
		return "nvidia_com_mig_" + KSMName(migProfile)
	}
	return "nvidia_com_gpu"
}

// KSMName is a Kubernetes name (a resource, a label key) as
// kube-state-metrics writes it into a label: every character but a
// letter, a digit or an underscore made an underscore.
func KSMName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// IsGPUResource says whether a device-plugin resource is an NVIDIA GPU or MIG
// resource (nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb, ...):
// the exporter reads holders of these from the kubelet, the reclaimer looks
// for pods that ask for them.
func IsGPUResource(name string) bool {
	return name == "nvidia.com/gpu" || strings.HasPrefix(name, "nvidia.com/gpu.") || strings.HasPrefix(name, "nvidia.com/mig-")
}
