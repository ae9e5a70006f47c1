package sampler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
	"github.com/gpureclaim/gpureclaim/exporter/slurm"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

func step(t *testing.T, s *sampler.Snapshot, name string) sampler.Step {
	t.Helper()
	for _, st := range s.Steps {
		if st.Name == name {
			return st
		}
	}
	t.Fatalf("no step %s", name)
	return sampler.Step{}
}

func TestMIGUnitsAndTheirOwners(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxa100
pods:
  - {name: a, namespace: team-a, container: c}
  - {name: b, namespace: team-b, container: c}
gpus:
  - index: 0
    mig:
      - profile: 3g.20gb
        pods: [a]
        processes: [{pid: 100, pod: a, memory_used: 9GiB}]
      - profile: 2g.10gb
        pods: [b]
      - profile: 1g.5gb
        processes: [{pid: 101, user: root, memory_used: 1GiB}]
`), nil)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	g := s.GPUs[0]
	require.Equal(t, 1.0, g.MIGEnabled.V)
	require.Len(t, g.Units, 3)
	for _, u := range g.Units {
		require.Equal(t, "mig", u.Kind())
		require.Regexp(t, `^MIG-`, u.UUID)
		require.Equal(t, g.UUID, u.GPUUUID)
		require.False(t, u.Utilization.OK, "NVML has no utilization for MIG instances")
		require.False(t, u.SMActive.OK, "an A100 has no GPM")
	}
	require.Equal(t, "3g.20gb", g.Units[0].MIG.Profile)
	require.Equal(t, 3, g.Units[0].MIG.Slices)
	require.Equal(t, []sampler.Holder{{Namespace: "team-a", Pod: "a", Container: "c", MemoryUsed: 9 << 30, Processes: 1, StartTime: samplertest.T0.Add(0)}}, g.Units[0].Holders)
	require.Equal(t, []sampler.Holder{{Namespace: "team-b", Pod: "b", Container: "c"}}, g.Units[1].Holders, "allocated, no process: held all the same")
	require.Equal(t, "root", g.Units[2].Holders[0].User)
	var names []string
	for _, p := range g.Profiles {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.10gb"}, names)
}

func TestMPSClientsAreTheTenants(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	s := n.SampleAt(t, 20*time.Minute, 5*time.Second)
	g := s.GPUs[5]
	require.True(t, g.MPSServerRunning)
	require.Equal(t, sampler.Gauge{V: 3, OK: true}, g.MPSClients)
	u := g.Units[0]
	require.Len(t, u.Processes, 4, "the server and three clients")
	require.Len(t, u.Holders, 3, "the server is no tenant")
	for _, o := range u.Holders {
		require.Equal(t, "serving", o.Namespace)
		require.Equal(t, 1, o.Processes)
		require.False(t, o.SMUtil.OK, "NVML reports MPS utilization for the server only")
	}
}

// A time-sliced GPU shared by two pods: the kubelet says both hold it, and
// only each process's cgroup says which memory and SM time is whose.
const sharedScenario = `
node: n1
system: dgxh100
users: {alice: 1000}
pods:
  - {name: p1, namespace: ns1, container: web}
  - {name: p2, namespace: ns2, container: worker}
gpus:
  - index: 2
    sm_active: 0.5
    pods: [p1, p2]
    processes:
      - {pid: 200, pod: p1, memory_used: 10GiB, sm_util: 0.4}
      - {pid: 201, pod: p2, memory_used: 20GiB, sm_util: 0.1}
      - {pid: 202, pod: p2, memory_used: 1GiB, sm_util: 0.05, started: -1h}
      - {pid: 203, user: alice, memory_used: 2GiB}
`

func TestSharedGPUAttributionThroughCgroups(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, sharedScenario), nil)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	u := s.GPUs[2].Units[0]
	require.Len(t, u.Holders, 3)
	alice, p1, p2 := u.Holders[0], u.Holders[1], u.Holders[2] // sorted: no namespace first
	require.Equal(t, sampler.Holder{Namespace: "ns1", Pod: "p1", Container: "web", MemoryUsed: 10 << 30, SMUtil: sampler.Gauge{V: 0.4, OK: true}, Processes: 1, StartTime: samplertest.T0}, p1)
	require.Equal(t, "ns2", p2.Namespace)
	require.Equal(t, "worker", p2.Container)
	require.EqualValues(t, 21<<30, p2.MemoryUsed)
	require.InDelta(t, 0.15, p2.SMUtil.V, 1e-9)
	require.Equal(t, 2, p2.Processes)
	require.Equal(t, samplertest.T0.Add(-time.Hour), p2.StartTime, "the oldest process")
	require.Equal(t, sampler.Holder{User: "alice", MemoryUsed: 2 << 30, Processes: 1, StartTime: samplertest.T0}, alice, "outside any pod")
}

// On a shared unit, a process whose pod the exporter cannot name counts for
// no pod: crediting it to one would leave the other reading idle while
// busy. Without a pod list (the node binary's default) and with one that
// does not know the pod, the pods' processes are unattributed and counted.
func TestSharedGPUWithoutPodMetadataIsUnattributed(t *testing.T) {
	for name, pods := range map[string]podmeta.Resolver{"no pod list": samplertest.NoPods, "pods not listed": podmeta.NewStatic(nil)} {
		t.Run(name, func(t *testing.T) {
			n := samplertest.Start(t, samplertest.Scenario(t, sharedScenario), func(s *nvmlsim.Sim) sampler.Config {
				return sampler.Config{NVML: s, Pods: pods}
			})
			s := n.SampleAt(t, time.Minute, 5*time.Second)
			u := s.GPUs[2].Units[0]
			var holders []string
			for _, o := range u.Holders {
				holders = append(holders, o.Pod+o.User)
				if o.Pod != "" {
					require.Zero(t, o.Processes, "two pods share the GPU: no process is credited to either")
				}
				if o.User == names.UnattributedUser {
					require.Equal(t, 3, o.Processes)
				}
			}
			require.Equal(t, []string{names.UnattributedUser, "alice", "p1", "p2"}, holders, "not root: a pod's process is not its Unix user's")
			require.Equal(t, 3, u.Unattributed, "counted")
		})
	}
}

// A process of a pod the kubelet did not allocate the unit to counts for
// its own pod, not for the unit's one holder.
func TestProcessOfAnotherPodIsNotTheHolders(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxh100
pods:
  - {name: holder, namespace: ns, container: c}
  - {name: intruder, namespace: ns, container: c}
gpus:
  - index: 0
    sm_active: 0.5
    pods: [holder]
    processes:
      - {pid: 300, pod: intruder, memory_used: 1GiB, sm_util: 0.5}
`), nil)
	u := n.SampleAt(t, time.Minute, 5*time.Second).GPUs[0].Units[0]
	require.Len(t, u.Holders, 2)
	require.Equal(t, "holder", u.Holders[0].Pod)
	require.Zero(t, u.Holders[0].Processes, "the holder runs nothing")
	require.Equal(t, "intruder", u.Holders[1].Pod)
	require.Equal(t, 1, u.Holders[1].Processes)
}

func TestKeepMarkFromPodMetadata(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxh100
pods:
  - {name: keepme, namespace: ns, labels: {gpureclaim.io/keep: "true"}}
  - {name: other, namespace: ns}
gpus:
  - {index: 0, pods: [keepme]}
  - {index: 1, pods: [other]}
`), nil)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	require.True(t, s.GPUs[0].Units[0].Holders[0].Keep)
	require.False(t, s.GPUs[1].Units[0].Holders[0].Keep)
}

func TestAGPULostMidRunLeavesTheOthers(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxh100
gpus:
  - {index: 3, lost_after: 2m, sm_active: 0.5}
  - {index: 4, sm_active: 0.7}
`), nil)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	require.True(t, s.GPUs[3].Up)
	require.True(t, step(t, s, sampler.StepDevice).Success)

	s = n.SampleAt(t, 3*time.Minute, 5*time.Second)
	lost := s.GPUs[3]
	require.False(t, lost.Up)
	require.NotEmpty(t, lost.UUID, "a lost GPU keeps its identity")
	require.Equal(t, "NVIDIA H100 80GB HBM3", lost.Model, "from before it was lost")
	require.Empty(t, lost.Units)
	require.False(t, step(t, s, sampler.StepDevice).Success)
	require.NotZero(t, s.NVMLErrors[sampler.ErrorKey{Call: "nvmlDeviceGetHandleByIndex", UUID: lost.UUID, Error: "ERROR_GPU_IS_LOST"}],
		"as real NVML, a lost GPU has no handle; it is known by its index")
	s = n.SampleAt(t, 4*time.Minute, 5*time.Second)
	require.Equal(t, lost.UUID, s.GPUs[3].UUID, "it stays visible, down, cycle after cycle")
	require.Equal(t, lost.PCIBusID, s.GPUs[3].PCIBusID)
	require.False(t, s.GPUs[3].Up)
	for i, g := range s.GPUs {
		if i == 3 {
			continue
		}
		require.True(t, g.Up, "GPU %d", i)
	}
	require.InDelta(t, 0.7, s.GPUs[4].Units[0].SMActive.V, 1e-9)
}

// noGPM is an NVML on which GPM is not supported, as on Ampere and older or
// under some virtualization.
type noGPM struct{ *nvmlsim.Sim }

func (noGPM) GpmQueryDeviceSupport(nvml.Device) (nvml.GpmSupport, nvml.Return) {
	return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED
}

func TestGPMNotSupportedFallsBackToUtilization(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), func(s *nvmlsim.Sim) sampler.Config {
		return sampler.Config{NVML: noGPM{s}}
	})
	s := n.SampleAt(t, 20*time.Minute, 5*time.Second)
	u := s.GPUs[3].Units[0]
	require.False(t, s.GPUs[3].GPMSupported)
	require.False(t, u.SMActive.OK)
	require.True(t, u.Utilization.OK, "the fallback")
	require.Equal(t, 1.0, u.Utilization.V)
	require.True(t, step(t, s, sampler.StepGPM).Success, "not supported is not a failure")
	require.Empty(t, s.NVMLErrors)
}

// panicky panics on one GPU's power reading, as a driver bug might.
type panicky struct {
	*nvmlsim.Sim
}

type panickyDevice struct{ nvml.Device }

func (panickyDevice) GetPowerUsage() (uint32, nvml.Return) { panic("driver bug") }

func (p panicky) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := p.Sim.DeviceGetHandleByIndex(i)
	if i == 1 {
		return panickyDevice{d}, ret
	}
	return d, ret
}

func TestAPanicOnOneGPUDoesNotBlankTheOthers(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), func(s *nvmlsim.Sim) sampler.Config {
		return sampler.Config{NVML: panicky{s}}
	})
	s := n.SampleAt(t, 20*time.Minute, 5*time.Second)
	require.False(t, s.GPUs[1].Up)
	require.True(t, s.GPUs[0].Up)
	require.True(t, s.GPUs[2].Up)
	require.False(t, step(t, s, sampler.StepDevice).Success)
}

func TestKilledProcessLeavesItsOwnerBehind(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	s := n.SampleAt(t, 20*time.Minute, 5*time.Second)
	require.Equal(t, 1, s.GPUs[2].Units[0].Holders[0].Processes)
	require.True(t, n.Kill(61234))
	s = n.SampleAt(t, 21*time.Minute, 5*time.Second)
	u := s.GPUs[2].Units[0]
	require.Empty(t, u.Processes)
	require.Equal(t, "notebook-carol", u.Holders[0].Pod, "the pod still holds the GPU until it is evicted")
	require.Zero(t, u.Holders[0].Processes)
	require.Zero(t, u.MemoryUsedBytes.V)

	require.True(t, n.RemovePod("notebook-carol"))
	s = n.SampleAt(t, 22*time.Minute, 5*time.Second)
	require.Empty(t, s.GPUs[2].Units[0].Holders, "evicted: the GPU is free")
}

func TestPodResourcesOutageKeepsTheLastAnswer(t *testing.T) {
	n := samplertest.Start(t, samplertest.Builtin(t, "demo"), nil)
	s := n.SampleAt(t, 20*time.Minute, 5*time.Second)
	require.True(t, step(t, s, sampler.StepPodResources).Success)
	n.Close() // the kubelet goes away
	s = n.SampleAt(t, 21*time.Minute, 5*time.Second)
	require.False(t, step(t, s, sampler.StepPodResources).Success)
	require.Equal(t, "notebook-carol", s.GPUs[2].Units[0].Holders[0].Pod)
}

type slurmJobs struct {
	jobs  []slurm.Job
	err   error
	calls int
}

func (s *slurmJobs) Jobs(context.Context) ([]slurm.Job, error) { s.calls++; return s.jobs, s.err }
func (s *slurmJobs) PendingGPUs(context.Context) (int, error)  { return 5, s.err }

// A GPU a Slurm job holds by allocation is held with no process on it; a
// job with a process on its GPU is one owner, started when the job did; a
// failed read keeps the last answer and says so.
func TestSlurmAllocationsHoldGPUs(t *testing.T) {
	started := samplertest.T0.Add(-2 * time.Hour)
	lister := &slurmJobs{jobs: []slurm.Job{
		{ID: "41", User: "alice", Partition: "gpu", Start: started, GPUs: []int{0, 1}},
		{ID: "42", User: "bob", Partition: "gpu", Start: started, Keep: true, GPUs: []int{2}},
	}}
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxh100
users: {bob: 1002}
gpus:
  - {index: 0, sm_active: 0}
  - {index: 1, sm_active: 0}
  - {index: 2, sm_active: 0.9, processes: [{pid: 77, user: bob, slurm_job: "42", memory_used: 10GiB, started: -1h}]}
  - {index: 3, sm_active: 0}
`), func(sim *nvmlsim.Sim) sampler.Config { return sampler.Config{NVML: sim, Slurm: lister} })
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	for _, i := range []int{0, 1} {
		require.Equal(t, []sampler.Holder{{User: "alice", SlurmJob: "41", StartTime: started}}, s.GPUs[i].Units[0].Holders, "GPU %d: held by the allocation, no process", i)
	}
	bob := s.GPUs[2].Units[0].Holders
	require.Len(t, bob, 1, "the job's process and its allocation are one owner")
	require.Equal(t, "42", bob[0].SlurmJob)
	require.Equal(t, 1, bob[0].Processes)
	require.True(t, bob[0].Keep, "kept by the job's comment")
	require.Equal(t, started, bob[0].StartTime, "the allocation started before its process")
	require.Empty(t, s.GPUs[3].Units[0].Holders, "no job holds GPU 3")
	require.True(t, step(t, s, sampler.StepSlurm).Success)
	require.Len(t, s.SlurmJobs, 2)
	n.SampleAt(t, time.Minute+10*time.Second, 5*time.Second)
	require.Equal(t, 1, lister.calls, "slurmctld is asked at most every 30s, not every sample")

	lister.jobs, lister.err = nil, errors.New("slurm_load_jobs error: Unable to contact slurm controller")
	s = n.SampleAt(t, 2*time.Minute, 5*time.Second)
	require.False(t, step(t, s, sampler.StepSlurm).Success)
	require.Len(t, s.GPUs[0].Units[0].Holders, 1, "a controller outage does not free the GPUs")
}

// On a node whose GPUs NVIDIA's DRA driver allocates, the kubelet names
// devices as the driver does: a GPU by its minor number (here not its
// index), a MIG device by its parent's minor number, its GPU instance
// profile id and its placement. The sampler resolves both with NVML and
// the holders carry their claim; a GPU two claims share has both.
func TestDRAHoldersThroughTheirClaims(t *testing.T) {
	n := samplertest.Start(t, samplertest.Scenario(t, `
node: n1
system: dgxa100
allocation: dra
pods:
  - {name: train, namespace: ml, container: c, claim: train-gpus}
  - {name: slice, namespace: ml, container: c}
  - {name: a, namespace: web, container: c}
  - {name: b, namespace: web, container: c}
gpus:
  - {index: 0, minor: 3, pods: [train], processes: [{pid: 100, pod: train, memory_used: 9GiB}]}
  - {index: 1, minor: 0, pods: [a, b]}
  - index: 2
    minor: 1
    mig:
      - {profile: 3g.20gb}
      - {profile: 1g.5gb, pods: [slice]}
      - {profile: 1g.5gb}
`), nil)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	require.Equal(t, 3, s.GPUs[0].Minor)
	require.Equal(t, []sampler.Holder{{Namespace: "ml", Pod: "train", Container: "c", Claim: podresources.Claim{Namespace: "ml", Name: "train-gpus"},
		MemoryUsed: 9 << 30, SMUtil: sampler.Gauge{OK: true}, Processes: 1, StartTime: samplertest.T0}}, s.GPUs[0].Units[0].Holders, "its process is the claim's holder's")
	require.Equal(t, []sampler.Holder{
		{Namespace: "web", Pod: "a", Container: "c", Claim: podresources.Claim{Namespace: "web", Name: "a-gpu"}},
		{Namespace: "web", Pod: "b", Container: "c", Claim: podresources.Claim{Namespace: "web", Name: "b-gpu"}},
	}, s.GPUs[1].Units[0].Holders)
	mig := s.GPUs[2].Units
	require.Len(t, mig, 3)
	for i, want := range [][]sampler.Holder{nil, {{Namespace: "ml", Pod: "slice", Container: "c", Claim: podresources.Claim{Namespace: "ml", Name: "slice-gpu"}}}, nil} {
		require.Equal(t, want, nilIfEmpty(mig[i].Holders), "instance %d (%s, placement %d)", i, mig[i].MIG.Profile, mig[i].MIG.PlacementStart)
	}
	require.GreaterOrEqual(t, mig[1].MIG.ProfileID, 0)

	// Allocations a cluster's scheduler made, as the simulator's pod watch
	// reads them from ResourceClaims, are reported beside the scenario's.
	n.SetClusterClaims([]nvmlsim.ClusterClaim{{Namespace: "lab", Pod: "nb-0", Container: "main", ClaimNamespace: "lab", ClaimName: "nb-0-gpu-x7k2p",
		Devices: []nvmlsim.ClaimDevice{{Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-4"}}}})
	s = n.SampleAt(t, 2*time.Minute, 5*time.Second)
	require.Equal(t, []sampler.Holder{{Namespace: "lab", Pod: "nb-0", Container: "main", Claim: podresources.Claim{Namespace: "lab", Name: "nb-0-gpu-x7k2p"}}},
		s.GPUs[4].Units[0].Holders, "gpu-4 is the GPU of minor 4")
	require.Len(t, s.GPUs[0].Units[0].Holders, 1, "the scenario's holders stay")
	require.Equal(t, sampler.Gauge{V: 0, OK: true}, s.DRAUnresolved)

	// A name that follows the convention but matches no unit (no GPU of
	// minor 42) holds nothing the exporter can name: counted, not dropped.
	n.SetClusterClaims([]nvmlsim.ClusterClaim{{Namespace: "lab", Pod: "nb-1", Container: "main", ClaimNamespace: "lab", ClaimName: "nb-1-gpu",
		Devices: []nvmlsim.ClaimDevice{{Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-42"}, {Driver: "gpu.nvidia.com", Pool: "n1", Device: "gpu-1-mig-1g.5gb-19-6"}}}})
	s = n.SampleAt(t, 3*time.Minute, 5*time.Second)
	require.Equal(t, sampler.Gauge{V: 2, OK: true}, s.DRAUnresolved, "gpu-42, and a MIG instance at a placement none has")
}

func nilIfEmpty(os []sampler.Holder) []sampler.Holder {
	if len(os) == 0 {
		return nil
	}
	return os
}

// sliceReader stands for the node's ResourceSlices.
type sliceReader struct {
	uuids map[podresources.Device]string
	reads int
}

func (r *sliceReader) DeviceUUIDs(context.Context) (map[podresources.Device]string, error) {
	r.reads++
	return r.uuids, nil
}

// A DRA device whose name does not follow the driver's convention is
// resolved through the uuid its ResourceSlice publishes, read at most once
// a SliceInterval while a name is unknown; without ResourceSlices its
// holder is not attributed.
func TestDRANameThroughResourceSlices(t *testing.T) {
	sc := `
node: n1
system: dgxh100
allocation: dra
`
	claim := func(n *samplertest.Node) {
		n.SetClusterClaims([]nvmlsim.ClusterClaim{{Namespace: "lab", Pod: "nb-0", Container: "main", ClaimNamespace: "lab", ClaimName: "nb-0-gpu",
			Devices: []nvmlsim.ClaimDevice{{Driver: "gpu.nvidia.com", Pool: "n1", Device: "h100-slot-b"}, {Driver: "gpu.nvidia.com", Pool: "n1", Device: "h100-slot-x"}}}})
	}
	n := samplertest.Start(t, samplertest.Scenario(t, sc), nil)
	claim(n)
	s := n.SampleAt(t, time.Minute, 5*time.Second)
	for _, g := range s.GPUs {
		require.Empty(t, g.Units[0].Holders, "not attributed without ResourceSlices")
	}
	require.Equal(t, sampler.Gauge{V: 2, OK: true}, s.DRAUnresolved, "and counted")

	reader := &sliceReader{}
	n = samplertest.Start(t, samplertest.Scenario(t, sc), func(sim *nvmlsim.Sim) sampler.Config {
		return sampler.Config{NVML: sim, Slices: reader, SliceInterval: time.Minute}
	})
	uuid := n.Devices[2].(interface{ GetUUID() (string, nvml.Return) })
	gpu2, _ := uuid.GetUUID()
	reader.uuids = map[podresources.Device]string{{Driver: "gpu.nvidia.com", Pool: "n1", Name: "h100-slot-b"}: gpu2}
	claim(n)
	s = n.SampleAt(t, time.Minute, 5*time.Second)
	require.Equal(t, []sampler.Holder{{Namespace: "lab", Pod: "nb-0", Container: "main", Claim: podresources.Claim{Namespace: "lab", Name: "nb-0-gpu"}}}, s.GPUs[2].Units[0].Holders)
	require.Equal(t, 1, reader.reads, "h100-slot-x is still unknown, but the slices were read this minute")
	require.Equal(t, sampler.Gauge{V: 1, OK: true}, s.DRAUnresolved, "h100-slot-x")
	n.SampleAt(t, 2*time.Minute+5*time.Second, 5*time.Second)
	require.Equal(t, 2, reader.reads, "read again a minute later, while a name is unknown")
}
