package packing

import (
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpureclaim/gpureclaim/internal/mig"
)

// Models are the GPU models whose MIG profiles are known without a GPU
// at hand, from go-nvml's own description of each (the simulator's too),
// by the short name a user gives.
var Models = map[string]gpus.Config{
	"A100-40GB":  gpus.A100_SXM4_40GB,
	"A100-80GB":  gpus.A100_SXM4_80GB,
	"A30-24GB":   gpus.A30_PCIE_24GB,
	"H100-80GB":  gpus.H100_SXM5_80GB,
	"H200-141GB": gpus.H200_SXM5_141GB,
	"B200-180GB": gpus.B200_SXM5_180GB,
}

// ModelNames lists Models' names, sorted.
func ModelNames() []string {
	out := make([]string, 0, len(Models))
	for k := range Models {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Profiles lists the sizing profiles of a GPU model, smallest first, named
// as the exporter and the device plugin name them.
func Profiles(c gpus.Config) []mig.Profile {
	gpuBytes := c.MemoryMB << 20
	var out []mig.Profile
	for id, info := range c.MIGProfiles.GpuInstanceProfiles {
		if !mig.Sizing(id) {
			continue
		}
		out = append(out, mig.Profile{ID: id, Name: mig.Name(id, info, gpuBytes), Slices: int(info.SliceCount), MemoryBytes: info.MemorySizeMB << 20})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Slices != out[j].Slices {
			return out[i].Slices < out[j].Slices
		}
		return out[i].MemoryBytes < out[j].MemoryBytes
	})
	return out
}

// ModelOf finds a model by a product name as NVML reports it ("NVIDIA
// H100 80GB HBM3") or by its short name.
func ModelOf(name string) (gpus.Config, bool) {
	if c, ok := Models[name]; ok {
		return c, true
	}
	for _, c := range Models {
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
	}
	return gpus.Config{}, false
}
