package sampler_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
)

// BenchmarkSampleCycleDemo reads the whole demo node once: 8 GPUs, one of
// them cut into 4 MIG instances, with GPM, processes, /proc and pod-resources.
// It also reports the NVML calls each GPU costs per cycle.
func BenchmarkSampleCycleDemo(b *testing.B) {
	n := samplertest.Start(b, samplertest.Builtin(b, "demo"), nil)
	ctx := context.Background()
	n.Sampler.Sample(ctx) // first cycle: static facts, GPM buffers
	n.Calls()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n.Clock.Advance(time.Second)
		n.Sampler.Sample(ctx)
	}
	b.StopTimer()
	total := 0
	for _, c := range n.Calls() {
		total += c
	}
	b.ReportMetric(float64(total)/float64(b.N)/8, "nvml-calls/gpu")
}
