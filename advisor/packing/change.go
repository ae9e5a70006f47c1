package packing

import (
	"fmt"
	"math"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// changes writes, per workload, the change its owner makes.
func (p *Plan) changes() {
	for i := range p.Advice {
		a := &p.Advice[i]
		limitGiB := int(math.Ceil(a.Fit.MemoryLimitBytes / (1 << 30)))
		switch {
		case a.GPU >= 0 && p.GPUs[a.GPU].Sharing == SharingMPS:
			a.Change = fmt.Sprintf("resources.limits: {%s: 1}; env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=%dG (MPS, shared GPU %d; or a DRA claim on a shared device with capacity {memory: %dGi})",
				names.SharedGPUResource, limitGiB, a.GPU, limitGiB)
		case a.GPU >= 0:
			a.Change = fmt.Sprintf("resources.limits: {%s: 1}; cap the framework's memory at %d GiB (time-slicing, shared GPU %d: no memory isolation across teams; or a DRA claim with capacity {memory: %dGi})",
				names.SharedGPUResource, limitGiB, a.GPU, limitGiB)
		case a.Fit.Profile != "" && a.Fit.Kind != FitWhole:
			a.Change = fmt.Sprintf("resources.limits: {nvidia.com/mig-%s: 1} instead of nvidia.com/gpu: 1", a.Fit.Profile)
		}
	}
}
