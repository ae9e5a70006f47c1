package nvmlsim

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpureclaim/gpureclaim/internal/mig"
)

// system is one of go-nvml's mock servers.
type system struct {
	count  int
	config gpus.Config
	gpm    bool
	new    func() *server.Server
}

var systems = map[string]system{
	"dgxa100": {8, gpus.A100_SXM4_40GB, false, dgxa100.New},
	"dgxh100": {8, gpus.H100_SXM5_80GB, true, dgxh100.New},
	"dgxh200": {8, gpus.H200_SXM5_141GB, true, dgxh200.New},
}

func (s system) memoryBytes() uint64 { return s.config.MemoryMB << 20 }

// profile finds a MIG profile by its device-plugin name.
func (s system) profile(name string) (nvml.GpuInstanceProfileInfo, bool) {
	for id, info := range s.config.MIGProfiles.GpuInstanceProfiles {
		if mig.Name(id, info, s.memoryBytes()) == name {
			return info, true
		}
	}
	return nvml.GpuInstanceProfileInfo{}, false
}

func (s system) profileNames() string {
	var names []string
	for id := 0; id < nvml.GPU_INSTANCE_PROFILE_COUNT; id++ {
		if info, ok := s.config.MIGProfiles.GpuInstanceProfiles[id]; ok {
			names = append(names, mig.Name(id, info, s.memoryBytes()))
		}
	}
	return strings.Join(names, ", ")
}

// computeProfileID is the compute-instance profile that spans a GPU instance
// of the given size.
func computeProfileID(slices uint32) (int, error) {
	switch slices {
	case 1:
		return nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nil
	case 2:
		return nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, nil
	case 3:
		return nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nil
	case 4:
		return nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE, nil
	case 7:
		return nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE, nil
	}
	return 0, fmt.Errorf("no compute-instance profile spans %d slices", slices)
}
