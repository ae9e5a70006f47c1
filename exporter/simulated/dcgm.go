package main

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Expositions the simulator serves its scenario in.
const (
	expositionGPUreclaim = "gpureclaim"
	expositionDCGM       = "dcgm"
)

// dcgmLabels are the labels of dcgm-exporter's GPU series with its
// Kubernetes pod mapping on. A label a series does not have is empty, which
// Prometheus takes for absent: one label set serves whole GPUs, MIG
// instances and units no pod holds.
var dcgmLabels = []string{names.DCGMLabelGPU, names.DCGMLabelUUID, "pci_bus_id", "device", names.DCGMLabelModel, names.DCGMLabelHostname,
	names.DCGMLabelMIGProfile, names.DCGMLabelMIGID, names.LabelNamespace, names.LabelPod, names.LabelContainer,
	names.DCGMLabelDRAClaimName, names.DCGMLabelDRAClaimNamespace, names.DCGMLabelDRADevice, names.DCGMLabelDRADriver, names.DCGMLabelDRAPool}

// dcgmCollector serves a snapshot as dcgm-exporter 4.x would: the fields
// gpureclaim's rules for source: dcgm read, memory in MiB, utilization in
// percent and only on whole GPUs, profiling fields only where the GPU has
// them, each series repeated for every pod that holds the unit, with the
// claim and the DRA driver's device name where it holds it through DRA.
type dcgmCollector struct {
	src                            collector.Source
	smActive, util, fbUsed, fbFree *prometheus.Desc
}

func newDCGMCollector(src collector.Source) *dcgmCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, dcgmLabels, nil) }
	return &dcgmCollector{src: src,
		smActive: d(names.DCGMSMActive, "The ratio of cycles an SM has at least 1 warp assigned."),
		util:     d(names.DCGMGPUUtil, "GPU utilization (in %)."),
		fbUsed:   d(names.DCGMFBUsed, "Framebuffer memory used (in MiB)."),
		fbFree:   d(names.DCGMFBFree, "Framebuffer memory free (in MiB)."),
	}
}

func (c *dcgmCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.smActive, c.util, c.fbUsed, c.fbFree} {
		ch <- d
	}
}

func (c *dcgmCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Latest()
	if s == nil {
		return
	}
	const mib = 1 << 20
	for _, g := range s.GPUs {
		idx := strconv.Itoa(g.Index)
		for _, u := range g.Units {
			profile, instance := "", ""
			if u.MIG != nil {
				profile, instance = u.MIG.Profile, strconv.Itoa(u.MIG.GPUInstanceID)
			}
			device := names.DRAGPUName(g.Minor)
			if u.MIG != nil {
				device = names.DRAMIGName(g.Minor, u.MIG.Profile, u.MIG.ProfileID, u.MIG.PlacementStart)
			}
			var pods [][]string
			for _, o := range u.Holders {
				if o.Pod == "" {
					continue
				}
				p := []string{o.Namespace, o.Pod, o.Container, "", "", "", "", ""}
				if o.Claim.Name != "" {
					p = []string{o.Namespace, o.Pod, o.Container, o.Claim.Name, o.Claim.Namespace, device, names.DRADrivers[0], s.Node}
				}
				pods = append(pods, p)
			}
			if len(pods) == 0 {
				pods = [][]string{make([]string, 8)} // a unit no pod holds: one series, no pod labels
			}
			for _, p := range pods {
				l := append([]string{idx, g.UUID, g.PCIBusID, "nvidia" + idx, g.Model, s.Node, profile, instance}, p...)
				if u.SMActive.OK {
					ch <- prometheus.MustNewConstMetric(c.smActive, prometheus.GaugeValue, u.SMActive.V, l...)
				}
				if u.Utilization.OK && u.MIG == nil {
					ch <- prometheus.MustNewConstMetric(c.util, prometheus.GaugeValue, u.Utilization.V*100, l...)
				}
				if u.MemoryUsedBytes.OK && u.MemoryTotalBytes.OK {
					ch <- prometheus.MustNewConstMetric(c.fbUsed, prometheus.GaugeValue, float64(int64(u.MemoryUsedBytes.V)/mib), l...)
					ch <- prometheus.MustNewConstMetric(c.fbFree, prometheus.GaugeValue, float64(int64(u.MemoryTotalBytes.V-u.MemoryUsedBytes.V)/mib), l...)
				}
			}
		}
	}
}
