package main

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
	"github.com/gpureclaim/gpureclaim/internal/names"
)

var update = flag.Bool("update", false, "rewrite testdata/dcgm.prom")

// A pod's whole GPU with profiling, a pod's GPU without (an A100 has no
// GPM: utilization only), a free GPU, and MIG instances held and not:
// served as dcgm-exporter serves them.
const dcgmScenario = `
node: gpu-node-1
system: dgxh100
pods:
  - {name: train-a, namespace: ml, container: main}
  - {name: nb-d, namespace: team-b, container: notebook}
  - {name: infer-1, namespace: serving, container: model}
  - {name: infer-2, namespace: serving, container: model}
gpus:
  - {index: 0, sm_active: 0, pods: [train-a], processes: [{pid: 100, pod: train-a, memory_used: 20GiB}]}
  - {index: 1, gpm: false, utilization: 0.9, pods: [infer-1, infer-2], processes: [{pid: 101, pod: infer-1, memory_used: 30GiB}, {pid: 102, pod: infer-2, memory_used: 10GiB}]}
  - index: 3
    mig:
      - {profile: 3g.40gb, sm_active: 0.01, pods: [nb-d], processes: [{pid: 103, pod: nb-d, memory_used: 30000MiB}]}
      - {profile: 1g.10gb, sm_active: 0}
`

func TestDCGMExposition(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, dcgmScenario), nil)
	n.SampleAt(t, 5*time.Minute, 10*time.Second)
	c := newDCGMCollector(n.Sampler)
	got, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, names.DCGMFields...)
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile("testdata/dcgm.prom", got, 0o644))
	}
	want, err := os.ReadFile("testdata/dcgm.prom")
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "go test ./exporter/simulated -run DCGM -update, and read the diff")

	s := string(got)
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, names.DCGMGPUUtil+"{") {
			require.Contains(t, line, `GPU_I_PROFILE=""`, "utilization only for whole GPUs, as DCGM gives it")
		}
	}
}

// A unit a pod holds through a ResourceClaim carries the claim and the DRA
// driver's device name, as dcgm-exporter 4.x labels it; one the device
// plugin allocated carries none.
func TestDCGMExpositionDRA(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: gpu-node-1
system: dgxh100
allocation: dra
pods:
  - {name: train-a, namespace: ml, container: main, claim: train-a-gpu-x7k2p}
gpus:
  - {index: 0, minor: 2, sm_active: 0, pods: [train-a]}
`), nil)
	n.SampleAt(t, 5*time.Minute, 10*time.Second)
	got, err := testutil.CollectAndFormat(newDCGMCollector(n.Sampler), expfmt.TypeTextPlain, names.DCGMFBUsed)
	require.NoError(t, err)
	require.Contains(t, string(got), `DCGM_FI_DEV_FB_USED{GPU_I_ID="",GPU_I_PROFILE="",UUID="`+n.Sampler.Latest().GPUs[0].UUID+`",container="main",device="nvidia0",dra_claim_name="train-a-gpu-x7k2p",dra_claim_namespace="ml",dra_device_name="gpu-2",dra_driver_name="gpu.nvidia.com",dra_pool_name="gpu-node-1",gpu="0",`)
}
