// Command nvmltime times the NVML calls the exporter makes, on GPU 0 of a
// real node: the median and the worst of 200 calls each.
package main

import (
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Fprintln(os.Stderr, "nvml init:", ret)
		os.Exit(1)
	}
	defer func() { _ = lib.Shutdown() }()
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		fmt.Fprintln(os.Stderr, "no GPU 0:", ret)
		os.Exit(1)
	}
	s1, _ := lib.GpmSampleAlloc()
	s2, _ := lib.GpmSampleAlloc()
	if ret := lib.GpmSampleGet(dev, s1); ret != nvml.SUCCESS {
		fmt.Fprintln(os.Stderr, "no GPM sample:", ret)
		os.Exit(1)
	}
	time.Sleep(200 * time.Millisecond)
	calls := []struct {
		name string
		f    func() nvml.Return
	}{
		{"nvmlDeviceGetMemoryInfo", func() nvml.Return { _, r := dev.GetMemoryInfo(); return r }},
		{"nvmlDeviceGetUtilizationRates", func() nvml.Return { _, r := dev.GetUtilizationRates(); return r }},
		{"nvmlDeviceGetPowerUsage", func() nvml.Return { _, r := dev.GetPowerUsage(); return r }},
		{"nvmlDeviceGetTotalEnergyConsumption", func() nvml.Return { _, r := dev.GetTotalEnergyConsumption(); return r }},
		{"nvmlDeviceGetTemperature", func() nvml.Return { _, r := dev.GetTemperature(nvml.TEMPERATURE_GPU); return r }},
		{"nvmlDeviceGetMigMode", func() nvml.Return { _, _, r := dev.GetMigMode(); return r }},
		{"nvmlDeviceGetComputeRunningProcesses", func() nvml.Return { _, r := dev.GetComputeRunningProcesses(); return r }},
		{"nvmlDeviceGetMPSComputeRunningProcesses", func() nvml.Return { _, r := dev.GetMPSComputeRunningProcesses(); return r }},
		{"nvmlDeviceGetProcessUtilization", func() nvml.Return { _, r := dev.GetProcessUtilization(0); return r }},
		{"nvmlGpmSampleGet", func() nvml.Return { return lib.GpmSampleGet(dev, s2) }},
		{"nvmlGpmMetricsGet", func() nvml.Return {
			m := &nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: s1, Sample2: s2}
			m.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
			return lib.GpmMetricsGet(m)
		}},
	}
	fmt.Printf("%-42s %12s %12s  %s\n", "call", "median", "max", "return")
	for _, c := range calls {
		var d []time.Duration
		var ret nvml.Return
		for i := 0; i < 200; i++ {
			start := time.Now()
			ret = c.f()
			d = append(d, time.Since(start))
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Printf("%-42s %12s %12s  %s\n", c.name, d[len(d)/2], d[len(d)-1], ret.Error())
	}
}
