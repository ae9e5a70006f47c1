package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// MIG exports MIG instances and the profiles each could be moved to.
type MIG struct {
	src                                      Source
	info, slices, candidate, candidateSlices *prometheus.Desc
}

// NewMIG returns the MIG collector.
func NewMIG(src Source) *MIG {
	return &MIG{
		src:    src,
		info:   desc("gpureclaim_mig_instance_info", "A MIG instance; always 1. Its memory is gpureclaim_unit_memory_total_bytes.", "uuid", "gpu_uuid", "profile", "gpu_instance_id", "compute_instance_id"),
		slices: desc("gpureclaim_mig_instance_slices", "Compute slices of the MIG instance's GPU instance (a GPU has 7).", "uuid", "gpu_uuid"),
		candidate: desc("gpureclaim_mig_profile_memory_bytes",
			"Memory of each MIG profile the instance's GPU offers, per instance: the candidates for right-sizing it.", "uuid", "gpu_uuid", "profile"),
		candidateSlices: desc("gpureclaim_mig_profile_slices",
			"Compute slices of each MIG profile the instance's GPU offers, per instance.", "uuid", "gpu_uuid", "profile"),
	}
}

func (c *MIG) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.slices
	ch <- c.candidate
	ch <- c.candidateSlices
}

func (c *MIG) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Latest()
	if s == nil {
		return
	}
	for i := range s.GPUs {
		g := &s.GPUs[i]
		for j := range g.Units {
			u := &g.Units[j]
			if u.MIG == nil {
				continue
			}
			gauge(ch, c.info, 1, u.UUID, u.GPUUUID, u.MIG.Profile, strconv.Itoa(u.MIG.GPUInstanceID), strconv.Itoa(u.MIG.ComputeInstanceID))
			gauge(ch, c.slices, float64(u.MIG.Slices), u.UUID, u.GPUUUID)
			seen := map[string]bool{}
			for _, p := range g.Profiles {
				if seen[p.Name] {
					continue
				}
				seen[p.Name] = true
				gauge(ch, c.candidate, float64(p.MemoryBytes), u.UUID, u.GPUUUID, p.Name)
				gauge(ch, c.candidateSlices, float64(p.Slices), u.UUID, u.GPUUUID, p.Name)
			}
		}
	}
}
