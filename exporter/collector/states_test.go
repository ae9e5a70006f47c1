package collector_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

// statesScenario puts each GPU in a state the driver can be in that a
// scrape must stay true to.
const statesScenario = `node: gpu-node-9
system: dgxh100
users: {alice: 1001, bob: 1002}
pods:
  - {name: nb, namespace: lab, container: main}
gpus:
  # MIG mode on, no instance: the driver still lists the process and its 24 GiB.
  - {index: 0, mig_enabled: true, processes: [{pid: 4001, user: alice, memory_used: 24GiB}]}
  # A process in a PID namespace the exporter does not see, on a unit no pod holds.
  - {index: 1, sm_active: 0, processes: [{pid: 4002, user: alice, memory_used: 10GiB, outside_proc: true}]}
  # The same in a pod's unit: the kubelet's allocation still names it.
  - {index: 2, sm_active: 0, pods: [nb], processes: [{pid: 4003, pod: nb, memory_used: 8GiB, outside_proc: true}]}
  # A graphics process (a remote desktop) holds the GPU as a CUDA job would.
  - {index: 3, sm_active: 0.02, processes: [{pid: 4004, user: bob, command: Xorg, memory_used: 1GiB, graphics: true}]}
  # The driver answers NOT_SUPPORTED for MPS clients.
  - {index: 4, sm_active: 0.5, mps_unsupported: true, processes: [{pid: 4005, user: bob, memory_used: 5GiB}]}
`

func statesNode(t *testing.T, logs *bytes.Buffer) *samplertest.Node {
	sc := samplertest.Scenario(t, statesScenario)
	return samplertest.Start(t, sc, func(s *nvmlsim.Sim) sampler.Config {
		return sampler.Config{NVML: s, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	})
}

func TestStatesScrapeGolden(t *testing.T) {
	var logs bytes.Buffer
	n := statesNode(t, &logs)
	n.SampleAt(t, 10*time.Minute, 10*time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector.All(n.Sampler, n.Clock.Now)...)
	got := stableScrape(t, reg)
	goldenScrape(t, "states.prom", got)
	promtoolClean(t, got)
}

func TestStatesAreTrueToTheDriver(t *testing.T) {
	var logs bytes.Buffer
	n := statesNode(t, &logs)
	s := n.SampleAt(t, 10*time.Minute, 10*time.Second)
	n.SampleAt(t, 11*time.Minute, 10*time.Second) // a second cycle logs nothing again
	g := s.GPUs

	t.Run("MIG on with no instance: the GPU's memory and process stay visible", func(t *testing.T) {
		require.Equal(t, sampler.Gauge{V: 1, OK: true}, g[0].MIGEnabled)
		require.Empty(t, g[0].Units)
		require.Equal(t, sampler.Gauge{V: 0, OK: true}, g[0].MIGInstances)
		require.Equal(t, sampler.Gauge{V: 24 << 30, OK: true}, g[0].MemoryUsedBytes)
		require.Equal(t, 1, g[0].Processes)
		require.Len(t, g[0].Unplaced, 1)
		require.Equal(t, 1, strings.Count(logs.String(), "MIG mode is on and the GPU has no MIG instance"), "said once:\n%s", logs.String())
		for _, st := range s.Steps {
			require.True(t, st.Success, "%s: no instance is no failure", st.Name)
		}
	})

	t.Run("a process /proc cannot place holds its unit, unattributed", func(t *testing.T) {
		u := g[1].Units[0]
		require.Equal(t, 1, u.Unattributed)
		require.Len(t, u.Holders, 1)
		require.Equal(t, names.UnattributedUser, u.Holders[0].User)
		require.EqualValues(t, 10<<30, u.Holders[0].MemoryUsed)
		require.Equal(t, 1, strings.Count(logs.String(), "processes NVML lists cannot be attributed"), "each cause once:\n%s", logs.String())
		require.Contains(t, logs.String(), "another PID namespace")

		pod := g[2].Units[0]
		require.Equal(t, 1, pod.Unattributed)
		require.Len(t, pod.Holders, 1)
		require.Equal(t, "nb", pod.Holders[0].Pod, "the kubelet's one allocation names the owner")
		require.Equal(t, 1, pod.Holders[0].Processes)
	})

	t.Run("a graphics process holds the GPU", func(t *testing.T) {
		u := g[3].Units[0]
		require.Len(t, u.Processes, 1)
		require.True(t, u.Processes[0].Graphics)
		require.Equal(t, "bob", u.Holders[0].User)
	})

	t.Run("MPS NOT_SUPPORTED: no client count", func(t *testing.T) {
		require.False(t, g[4].MPSClients.OK)
		require.Equal(t, sampler.Gauge{V: 0, OK: true}, g[1].MPSClients, "a GPU that answers: 0 clients")
	})
}

// Without process attribution every process is unattributed, and its unit
// still held.
func TestAttributionOff(t *testing.T) {
	var logs bytes.Buffer
	n := statesNode(t, &logs)
	smp := sampler.New(sampler.Config{NVML: n.Sim, Node: "gpu-node-9", Clock: n.Clock.Now,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	s := smp.Sample(t.Context())
	u := s.GPUs[3].Units[0]
	require.Equal(t, 1, u.Unattributed)
	require.Equal(t, names.UnattributedUser, u.Holders[0].User)
	require.Contains(t, logs.String(), "process attribution is off")
}

// failMIG fails listing a GPU's MIG instances, as a driver can.
type failMIG struct{ nvml.Device }

func (failMIG) GetMigDeviceHandleByIndex(int) (nvml.Device, nvml.Return) {
	return nil, nvml.ERROR_UNKNOWN
}

type failMIGLib struct{ *nvmlsim.Sim }

func (l failMIGLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Sim.DeviceGetHandleByIndex(i)
	if i == 0 && ret == nvml.SUCCESS {
		return failMIG{d}, ret
	}
	return d, ret
}

// A failure listing the instances shows in the collector's success and the
// log, once; the GPU's memory and processes stay.
func TestMIGListingFailure(t *testing.T) {
	var logs bytes.Buffer
	sc := samplertest.Scenario(t, statesScenario)
	n := samplertest.Start(t, sc, func(s *nvmlsim.Sim) sampler.Config {
		return sampler.Config{NVML: failMIGLib{s}, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	})
	s := n.SampleAt(t, 10*time.Minute, 10*time.Second)
	n.SampleAt(t, 11*time.Minute, 10*time.Second)
	for _, st := range s.Steps {
		if st.Name == sampler.StepMIG {
			require.False(t, st.Success)
		}
	}
	require.False(t, s.GPUs[0].MIGInstances.OK, "unknown, not 0")
	require.Equal(t, 1, s.GPUs[0].Processes)
	require.Equal(t, 1, strings.Count(logs.String(), "listing MIG instances failed"), "%s", logs.String())
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector.All(n.Sampler, n.Clock.Now)...)
	require.Contains(t, string(stableScrape(t, reg)), `gpureclaim_exporter_collector_success{collector="mig"} 0`)
}

// A GPU lost before the exporter ever read it has no UUID, and is still
// exported, down, by its index.
func TestAGPULostBeforeItsFirstReadIsDownByIndex(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxh100
gpus:
  - {index: 3, lost_after: 0s}
`), nil)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	require.False(t, s.GPUs[3].Up)
	require.Empty(t, s.GPUs[3].UUID)
	got, err := testutil.CollectAndFormat(collector.NewGPU(n.Sampler), expfmt.TypeTextPlain, "gpureclaim_gpu_up")
	require.NoError(t, err)
	require.Contains(t, string(got), `gpureclaim_gpu_up{gpu_index="3",gpu_uuid=""} 0`)
	require.Equal(t, 8, strings.Count(string(got), "gpureclaim_gpu_up{"), "every GPU, the lost one too")
	problems, err := testutil.CollectAndLint(collector.NewGPU(n.Sampler))
	require.NoError(t, err)
	require.Empty(t, problems)
}
