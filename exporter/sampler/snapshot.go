package sampler

import (
	"time"

	"github.com/gpureclaim/gpureclaim/exporter/slurm"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/podresources"

	"github.com/gpureclaim/gpureclaim/internal/mig"
)

// Snapshot is one sampling cycle's view of the node. It is never changed
// after it is published: scrapes read it without locks.
type Snapshot struct {
	Time   time.Time
	Node   string
	Driver Driver
	GPUs   []GPU
	// Steps reports each part of the cycle, for per-collector health.
	Steps []Step
	// SlurmJobs are the Slurm jobs holding the node's GPUs (nil without Slurm).
	SlurmJobs []slurm.Job
	// SlurmPendingGPUs are the GPUs the cluster's pending Slurm jobs ask
	// for; absent without Slurm, or when its queue could not be read.
	SlurmPendingGPUs Gauge
	// NVMLErrors counts failed NVML calls since start.
	NVMLErrors map[ErrorKey]uint64
	// DRAUnresolved counts the DRA devices the kubelet reports allocated
	// that resolve to no unit; absent without the kubelet's allocations.
	DRAUnresolved Gauge
}

// Driver is the node's NVIDIA driver.
type Driver struct {
	Version     string
	CUDAVersion string // e.g. "12.4"
	NVMLVersion string
}

// Step is the outcome of one part of the sampling cycle.
type Step struct {
	Name     string
	Success  bool
	Duration time.Duration
}

// ErrorKey identifies a kind of NVML failure.
type ErrorKey struct {
	Call  string // the NVML function, e.g. nvmlDeviceGetPowerUsage
	UUID  string // the GPU or MIG unit, "" for calls on no device
	Error string // the return code, e.g. ERROR_GPU_IS_LOST
}

// Gauge is a value NVML may not give.
type Gauge struct {
	V  float64
	OK bool
}

func some(v float64) Gauge { return Gauge{V: v, OK: true} }

// GPU is a physical GPU.
type GPU struct {
	Index int
	// Minor is the device's minor number (/dev/nvidia<minor>), which
	// NVIDIA's DRA driver names it by; -1 when NVML does not tell it.
	Minor    int
	UUID     string
	Model    string
	PCIBusID string
	// Up is false when this cycle could not read the GPU (e.g. it is lost).
	Up                 bool
	PowerWatts         Gauge
	EnergyJoules       Gauge
	TemperatureCelsius Gauge
	MIGEnabled         Gauge // 1 or 0
	MIGPendingEnabled  Gauge
	GPMSupported       bool
	MPSServerRunning   bool
	// MPSClients is absent where the driver does not answer for MPS.
	MPSClients Gauge
	// MemoryUsedBytes and MemoryTotalBytes are the whole GPU's, MIG or not.
	MemoryUsedBytes  Gauge
	MemoryTotalBytes Gauge
	// Processes counts every process NVML lists on the GPU, on a unit or not.
	Processes int
	// MIGInstances counts the MIG instances of a GPU in MIG mode (0: none).
	MIGInstances Gauge
	// Unplaced are processes on no unit: a GPU in MIG mode whose instance
	// the exporter could not read, or that has none.
	Unplaced []Process
	// Profiles are the MIG profiles this GPU offers for right-sizing.
	Profiles []mig.Profile
	Units    []Unit
}

// Unit is what a workload can hold: a whole GPU, or a MIG instance.
type Unit struct {
	UUID    string
	GPUUUID string
	MIG     *MIGInstance // nil for a whole GPU

	SMActive             Gauge // GPM SM_UTIL, 0-1
	SMOccupancy          Gauge // GPM SM_OCCUPANCY
	DRAMBandwidth        Gauge // GPM DRAM_BW_UTIL
	TensorActive         Gauge // GPM ANY_TENSOR_UTIL
	Utilization          Gauge // nvmlDeviceGetUtilizationRates .gpu
	MemoryControllerBusy Gauge // nvmlDeviceGetUtilizationRates .memory
	MemoryUsedBytes      Gauge
	MemoryTotalBytes     Gauge

	Processes []Process
	Holders   []Holder
	// Unattributed counts the processes /proc could not place.
	Unattributed int
}

// Kind is names.KindGPU or names.KindMIG.
func (u *Unit) Kind() string {
	if u.MIG != nil {
		return names.KindMIG
	}
	return names.KindGPU
}

// MIGInstance describes a MIG unit.
type MIGInstance struct {
	Profile           string
	GPUInstanceID     int
	ComputeInstanceID int
	Slices            int
	// ProfileID is the GPU instance's profile id and PlacementStart the
	// first memory slice of its placement: with the parent's minor number
	// they make the name NVIDIA's DRA driver gives it. -1 when unknown.
	ProfileID, PlacementStart int
}

// Process is a process with a context on a unit. PIDs are never metric
// labels; the node action endpoint uses them.
type Process struct {
	PID         int
	Name        string
	User        string
	MemoryUsed  uint64
	SMUtil      Gauge
	StartTime   time.Time
	PodUID      string
	ContainerID string
	SlurmJob    string
	MPSClient   bool
	// Graphics is a process with a graphics context (NVML lists it apart).
	Graphics bool
	// Unattributed says why /proc could not place the process; "" when it could.
	Unattributed string
}

// Holder is who holds a unit: a pod's container, or a Unix user (and Slurm
// job) on bare metal.
type Holder struct {
	Namespace, Pod, Container string
	User, SlurmJob            string
	// Claim is the ResourceClaim a pod holds the unit through (DRA).
	Claim podresources.Claim
	// Keep is set when the pod is marked to be kept.
	Keep bool
	// MemoryUsed sums the owner's processes on the unit.
	MemoryUsed uint64
	// SMUtil sums the owner's processes' share of SM time, where NVML gives it.
	SMUtil    Gauge
	Processes int
	// StartTime is the earliest start of the owner's processes; zero when none runs.
	StartTime time.Time
}

// Unit finds a unit by UUID.
func (s *Snapshot) Unit(uuid string) (*GPU, *Unit) {
	for i := range s.GPUs {
		for j := range s.GPUs[i].Units {
			if s.GPUs[i].Units[j].UUID == uuid {
				return &s.GPUs[i], &s.GPUs[i].Units[j]
			}
		}
	}
	return nil, nil
}
