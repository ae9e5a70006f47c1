package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
)

// A kubelet whose socket appears after the exporter started is picked up
// at the next sample, and the pod_resources step reads 0 until then.
func TestKubeletThatStartsLateIsPickedUp(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	o := &Options{PodResourcesSocket: socket, DRADrivers: "gpu.nvidia.com"}
	c, err := kubelet(o, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	sc, err := nvmlsim.Parse([]byte("node: n1\nsystem: dgxh100\npods: [{name: p, namespace: ns, container: c}]\ngpus: [{index: 0, pods: [p]}]\n"), ".")
	require.NoError(t, err)
	clock := fakeclock.New(time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC))
	sc.Start = clock.Now()
	sim, err := nvmlsim.New(sc, clock.Now)
	require.NoError(t, err)
	smp := sampler.New(sampler.Config{NVML: sim, Node: "n1", Allocations: c, Clock: clock.Now})
	step := func(s *sampler.Snapshot) sampler.Step {
		for _, st := range s.Steps {
			if st.Name == sampler.StepPodResources {
				return st
			}
		}
		t.Fatal("no pod_resources step")
		return sampler.Step{}
	}
	s := smp.Sample(context.Background())
	require.False(t, step(s).Success, "no kubelet yet: the step failed")
	require.Empty(t, s.GPUs[0].Units[0].Holders)

	uuid := s.GPUs[0].UUID
	srv, err := nvmlsim.ServePodResources(socket, func() []*podresourcesapi.PodResources {
		return []*podresourcesapi.PodResources{{Namespace: "ns", Name: "p", Containers: []*podresourcesapi.ContainerResources{{Name: "c",
			Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{uuid}}}}}}}
	})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	clock.Advance(5 * time.Second)
	s = smp.Sample(context.Background())
	require.True(t, step(s).Success)
	require.Len(t, s.GPUs[0].Units[0].Holders, 1)
	require.Equal(t, "p", s.GPUs[0].Units[0].Holders[0].Pod)
}

// A node with no kubelet folder at all (bare metal) reads no pods, rather
// than failing the pod_resources step forever; one whose folder is there
// waits for its socket.
func TestKubeletNode(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	require.False(t, kubeletNode(filepath.Join(dir, "no-kubelet", "kubelet.sock"), log))
	require.True(t, kubeletNode(filepath.Join(dir, "kubelet.sock"), log), "the folder is there, the socket not yet")
}
