// Package collector turns the sampler's latest snapshot into metrics. It
// never calls NVML: a scrape costs the same however slow the driver is.
// One collector per domain (gpu, unit, mig, owner, health), each linted on
// its own in the tests.
package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
)

// Source gives the latest snapshot; nil before the first sample.
type Source interface {
	Latest() *sampler.Snapshot
}

// All returns every collector of the exporter.
func All(src Source, clock func() time.Time) []prometheus.Collector {
	return append(FromSnapshot(src), NewHealth(src, clock))
}

// FromSnapshot returns the collectors that read nothing but the snapshot,
// which a SnapshotGatherer may cache.
func FromSnapshot(src Source) []prometheus.Collector {
	return []prometheus.Collector{NewGPU(src), NewUnit(src), NewMIG(src), NewHolder(src)}
}

// desc describes a metric; its name is written whole, so that searching
// for it finds where it is made.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// emit sends a gauge when NVML gave the value.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, g sampler.Gauge, labels ...string) {
	if g.OK {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, g.V, labels...)
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
