package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Unit exports per allocatable unit (whole GPU or MIG instance) values,
// labelled with the unit's UUID as the device plugin names it.
type Unit struct {
	src                                           Source
	info                                          *prometheus.Desc
	smActive, smOccupancy, dram, tensor           *prometheus.Desc
	utilization, memController, memUsed, memTotal *prometheus.Desc
	processes, unattributed                       *prometheus.Desc
}

// NewUnit returns the unit collector.
func NewUnit(src Source) *Unit {
	l := []string{"uuid", "gpu_uuid"}
	return &Unit{
		src:           src,
		info:          desc("gpureclaim_unit_info", "A unit a workload can hold: a whole GPU or a MIG instance; always 1.", "uuid", "gpu_uuid", "node", "kind", "gpu_index", "model", "mig_profile"),
		smActive:      desc("gpureclaim_unit_sm_active_ratio", "Share of SM cycles with at least one warp resident, averaged since the last sample (GPM SM_UTIL).", l...),
		smOccupancy:   desc("gpureclaim_unit_sm_occupancy_ratio", "Resident warps as a share of the SMs' maximum, averaged since the last sample (GPM SM_OCCUPANCY).", l...),
		dram:          desc("gpureclaim_unit_dram_bandwidth_ratio", "DRAM bandwidth used as a share of the peak (GPM DRAM_BW_UTIL).", l...),
		tensor:        desc("gpureclaim_unit_tensor_active_ratio", "Share of cycles any tensor pipe was active (GPM ANY_TENSOR_UTIL).", l...),
		utilization:   desc("gpureclaim_unit_utilization_ratio", "Share of time one or more kernels ran (NVML utilization.gpu): one tiny kernel reads 1.", l...),
		memController: desc("gpureclaim_unit_memory_controller_busy_ratio", "Share of time device memory was read or written (NVML utilization.memory).", l...),
		memUsed:       desc("gpureclaim_unit_memory_used_bytes", "Device memory allocated on the unit.", l...),
		memTotal:      desc("gpureclaim_unit_memory_total_bytes", "Device memory of the unit.", l...),
		processes:     desc("gpureclaim_unit_processes", "Processes with a context on the unit (compute, MPS clients, graphics).", l...),
		unattributed:  desc("gpureclaim_unit_unattributed_processes", "Processes on the unit the exporter cannot give a holder: its /proc cannot place them (attribution off, another PID namespace), or their pod cannot be named on a unit several pods share; they hold the unit as user \"(unattributed)\", and no holder of the unit is judged idle from its own share.", l...),
	}
}

func (c *Unit) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.smActive, c.smOccupancy, c.dram, c.tensor, c.utilization, c.memController, c.memUsed, c.memTotal, c.processes, c.unattributed} {
		ch <- d
	}
}

func (c *Unit) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Latest()
	if s == nil {
		return
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		for j := range g.Units {
			u := &g.Units[j]
			profile := ""
			if u.MIG != nil {
				profile = u.MIG.Profile
			}
			gauge(ch, c.info, 1, u.UUID, u.GPUUUID, s.Node, u.Kind(), strconv.Itoa(g.Index), g.Model, profile)
			emit(ch, c.smActive, u.SMActive, u.UUID, u.GPUUUID)
			emit(ch, c.smOccupancy, u.SMOccupancy, u.UUID, u.GPUUUID)
			emit(ch, c.dram, u.DRAMBandwidth, u.UUID, u.GPUUUID)
			emit(ch, c.tensor, u.TensorActive, u.UUID, u.GPUUUID)
			emit(ch, c.utilization, u.Utilization, u.UUID, u.GPUUUID)
			emit(ch, c.memController, u.MemoryControllerBusy, u.UUID, u.GPUUUID)
			emit(ch, c.memUsed, u.MemoryUsedBytes, u.UUID, u.GPUUUID)
			emit(ch, c.memTotal, u.MemoryTotalBytes, u.UUID, u.GPUUUID)
			gauge(ch, c.processes, float64(len(u.Processes)), u.UUID, u.GPUUUID)
			gauge(ch, c.unattributed, float64(u.Unattributed), u.UUID, u.GPUUUID)
		}
	}
}
