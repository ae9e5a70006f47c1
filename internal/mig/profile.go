// Package mig names MIG profiles the way the NVIDIA device plugin does, so
// that the names in metrics match the nvidia.com/mig-<profile> resources.
package mig

import (
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Profile is a GPU-instance profile a GPU offers.
type Profile struct {
	ID          int
	Name        string
	Slices      int
	MemoryBytes uint64
}

// MemoryGB rounds an instance's memory to the GB figure in its profile name:
// the share of the GPU's memory, rounded up to eighths, times the GPU's
// memory in whole GB (go-nvlib's rule). The 5% slack keeps an instance that
// is a little over an eighth (as NVML reports some) on that eighth.
func MemoryGB(instanceBytes, gpuBytes uint64) uint64 {
	const oneGB = 1 << 30
	if gpuBytes == 0 {
		return 0
	}
	eighths := math.Ceil(float64(instanceBytes)/float64(gpuBytes)*8 - 0.05)
	totalGB := float64((gpuBytes + oneGB - 1) / oneGB)
	return uint64(math.Round(eighths / 8 * totalGB))
}

// Name is the profile name of a GPU-instance profile, e.g. "3g.40gb",
// "1g.10gb+me".
func Name(id int, info nvml.GpuInstanceProfileInfo, gpuBytes uint64) string {
	name := fmt.Sprintf("%dg.%dgb", info.SliceCount, MemoryGB(info.MemorySizeMB<<20, gpuBytes))
	switch id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:
		name += "+me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX,
		nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX, nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:
		name += "+gfx"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:
		name += "-me"
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME, nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME:
		name += "+me.all"
	}
	return name
}

// Sizing says whether a profile is one a workload can be moved to for the
// same work: the plain compute profiles, not the media-engine or graphics
// variants.
func Sizing(id int) bool {
	switch id {
	case nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2,
		nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE,
		nvml.GPU_INSTANCE_PROFILE_4_SLICE, nvml.GPU_INSTANCE_PROFILE_6_SLICE,
		nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GPU_INSTANCE_PROFILE_8_SLICE:
		return true
	}
	return false
}

// Profiles lists the GPU-instance profiles a device offers, by profile id.
// A GPU without MIG support returns none.
func Profiles(dev nvml.Device, gpuBytes uint64) []Profile {
	var out []Profile
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := dev.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			continue
		}
		out = append(out, Profile{ID: id, Name: Name(id, info, gpuBytes), Slices: int(info.SliceCount), MemoryBytes: info.MemorySizeMB << 20})
	}
	return out
}
