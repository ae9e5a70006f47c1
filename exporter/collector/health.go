package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Health exports how the sampling went: each part of the cycle (the
// "collectors"), NVML errors, and how old the data is.
type Health struct {
	src                      Source
	clock                    func() time.Time
	success, duration, nvErr *prometheus.Desc
	age                      *prometheus.Desc
}

// NewHealth returns the health collector.
func NewHealth(src Source, clock func() time.Time) *Health {
	return &Health{
		src:      src,
		clock:    clock,
		success:  desc("gpureclaim_exporter_collector_success", "Whether the collector's part of the last sample succeeded on every GPU.", "collector"),
		duration: desc("gpureclaim_exporter_collector_duration_seconds", "Time the collector's part of the last sample took, over all GPUs.", "collector"),
		nvErr:    prometheus.NewDesc("gpureclaim_exporter_nvml_errors_total", "NVML calls that failed, by call, unit (empty for calls on no unit) and return code.", []string{"call", "uuid", "error"}, nil),
		age:      desc("gpureclaim_exporter_sample_age_seconds", "Time since the last sample was taken."),
	}
}

func (c *Health) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.success
	ch <- c.duration
	ch <- c.nvErr
	ch <- c.age
}

func (c *Health) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Latest()
	if s == nil {
		return
	}
	for _, st := range s.Steps {
		gauge(ch, c.success, boolf(st.Success), st.Name)
		gauge(ch, c.duration, st.Duration.Seconds(), st.Name)
	}
	for k, n := range s.NVMLErrors {
		ch <- prometheus.MustNewConstMetric(c.nvErr, prometheus.CounterValue, float64(n), k.Call, k.UUID, k.Error)
	}
	gauge(ch, c.age, max(0, c.clock().Sub(s.Time).Seconds()))
}
