package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// GPU exports per physical GPU values and the driver.
type GPU struct {
	src                                           Source
	info, up, power, energy, temp                 *prometheus.Desc
	migEnabled, migPending, gpm, mpsServer, mpsCl *prometheus.Desc
	memUsed, memTotal, processes, migInstances    *prometheus.Desc
	unplaced                                      *prometheus.Desc
	driver                                        *prometheus.Desc
}

// NewGPU returns the GPU collector.
func NewGPU(src Source) *GPU {
	l := []string{"gpu_uuid"}
	return &GPU{
		src:          src,
		info:         desc("gpureclaim_gpu_info", "A physical GPU on the node; always 1.", "gpu_uuid", "gpu_index", "model", "pci_bus_id", "node"),
		up:           desc("gpureclaim_gpu_up", "Whether the last sample could read the GPU (0 when it is lost or fails); gpu_uuid is empty for a GPU never read since the exporter started.", "gpu_uuid", "gpu_index"),
		power:        desc("gpureclaim_gpu_power_watts", "Power drawn by the GPU.", l...),
		energy:       prometheus.NewDesc("gpureclaim_gpu_energy_joules_total", "Energy used by the GPU since the driver loaded.", l, nil),
		temp:         desc("gpureclaim_gpu_temperature_celsius", "GPU die temperature.", l...),
		migEnabled:   desc("gpureclaim_gpu_mig_mode_enabled", "Whether MIG mode is enabled now.", l...),
		migPending:   desc("gpureclaim_gpu_mig_mode_pending_enabled", "Whether MIG mode will be enabled after the next GPU reset.", l...),
		gpm:          desc("gpureclaim_gpu_gpm_supported", "Whether the GPU supports GPM metrics (SM activity, occupancy, DRAM bandwidth, tensor activity).", l...),
		mpsServer:    desc("gpureclaim_gpu_mps_server_running", "Whether an MPS server runs on the GPU.", l...),
		mpsCl:        desc("gpureclaim_gpu_mps_clients", "Processes running on the GPU as MPS clients.", l...),
		memUsed:      desc("gpureclaim_gpu_memory_used_bytes", "Device memory allocated on the whole GPU, MIG instances included.", l...),
		memTotal:     desc("gpureclaim_gpu_memory_total_bytes", "Device memory of the whole GPU.", l...),
		processes:    desc("gpureclaim_gpu_processes", "Processes with a context on the GPU (compute, MPS clients, graphics), on any unit or none.", l...),
		unplaced:     desc("gpureclaim_gpu_unplaced_processes", "Processes on a GPU in MIG mode that are on no MIG instance the exporter could read.", l...),
		migInstances: desc("gpureclaim_gpu_mig_instances", "MIG instances of a GPU in MIG mode; 0 while it has none.", l...),
		driver:       desc("gpureclaim_driver_info", "The node's NVIDIA driver; always 1.", "driver_version", "cuda_driver_version", "nvml_version", "node"),
	}
}

func (c *GPU) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.up, c.power, c.energy, c.temp, c.migEnabled, c.migPending, c.gpm, c.mpsServer, c.mpsCl,
		c.memUsed, c.memTotal, c.processes, c.unplaced, c.migInstances, c.driver} {
		ch <- d
	}
}

func (c *GPU) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Latest()
	if s == nil {
		return
	}
	if s.Driver.Version != "" {
		gauge(ch, c.driver, 1, s.Driver.Version, s.Driver.CUDAVersion, s.Driver.NVMLVersion, s.Node)
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		// A GPU lost before its first read has no UUID: it is still shown,
		// down, by its index.
		gauge(ch, c.info, 1, g.UUID, strconv.Itoa(g.Index), g.Model, g.PCIBusID, s.Node)
		gauge(ch, c.up, boolf(g.Up), g.UUID, strconv.Itoa(g.Index))
		if !g.Up || g.UUID == "" {
			continue
		}
		emit(ch, c.power, g.PowerWatts, g.UUID)
		if g.EnergyJoules.OK {
			ch <- prometheus.MustNewConstMetric(c.energy, prometheus.CounterValue, g.EnergyJoules.V, g.UUID)
		}
		emit(ch, c.temp, g.TemperatureCelsius, g.UUID)
		emit(ch, c.migEnabled, g.MIGEnabled, g.UUID)
		emit(ch, c.migPending, g.MIGPendingEnabled, g.UUID)
		gauge(ch, c.gpm, boolf(g.GPMSupported), g.UUID)
		gauge(ch, c.mpsServer, boolf(g.MPSServerRunning), g.UUID)
		emit(ch, c.mpsCl, g.MPSClients, g.UUID)
		emit(ch, c.memUsed, g.MemoryUsedBytes, g.UUID)
		emit(ch, c.memTotal, g.MemoryTotalBytes, g.UUID)
		gauge(ch, c.processes, float64(g.Processes), g.UUID)
		emit(ch, c.migInstances, g.MIGInstances, g.UUID)
		if g.MIGEnabled.V == 1 {
			gauge(ch, c.unplaced, float64(len(g.Unplaced)), g.UUID)
		}
	}
}
