package podresources_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

func pod(ns, name, container string, devs ...*podresourcesapi.ContainerDevices) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesapi.ContainerResources{{Name: container, Devices: devs}}}
}

func dev(resource string, ids ...string) *podresourcesapi.ContainerDevices {
	return &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

// list asks a kubelet that answers with pods, served by the kubelet's own
// generated gRPC service, through the client.
func list(t *testing.T, drivers []string, pods ...*podresourcesapi.PodResources) podresources.Allocations {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	srv, err := nvmlsim.ServePodResources(socket, func() []*podresourcesapi.PodResources { return pods })
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	c, err := podresources.Dial(socket, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	if drivers != nil {
		c.Drivers = drivers
	}
	got, err := c.List(context.Background())
	require.NoError(t, err)
	return got
}

func TestListOverAUnixSocket(t *testing.T) {
	numa := &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 1}}}
	got := list(t, nil,
		pod("a", "whole", "c", dev("nvidia.com/gpu", "GPU-1", "GPU-2")),
		pod("a", "slice", "c", dev("nvidia.com/mig-1g.10gb", "MIG-1")),
		pod("b", "replica-0", "c", dev("nvidia.com/gpu", "GPU-3::0")),
		pod("b", "replica-1", "c", dev("nvidia.com/gpu.shared", "GPU-3::1")),
		pod("b", "nic", "c", dev("rdma/hca", "mlx5_0")),
		// Fields the exporter does not read are skipped: CPUs, memory, NUMA.
		&podresourcesapi.PodResources{Namespace: "c", Name: "pinned", CpuIds: []int64{3, 4}, Containers: []*podresourcesapi.ContainerResources{{
			Name: "c", CpuIds: []int64{3, 4}, Memory: []*podresourcesapi.ContainerMemory{{MemoryType: "memory", Size: 1 << 30, Topology: numa}},
			Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-4"}, Topology: numa}}}}},
	)
	require.Equal(t, map[string][]podresources.Container{
		"GPU-1": {{Namespace: "a", Pod: "whole", Container: "c"}},
		"GPU-2": {{Namespace: "a", Pod: "whole", Container: "c"}},
		"MIG-1": {{Namespace: "a", Pod: "slice", Container: "c"}},
		"GPU-3": {{Namespace: "b", Pod: "replica-0", Container: "c"}, {Namespace: "b", Pod: "replica-1", Container: "c"}},
		"GPU-4": {{Namespace: "c", Pod: "pinned", Container: "c"}},
	}, got.Units, "replicas count for their GPU; other resources are ignored")
	require.Empty(t, got.Devices)
	require.Empty(t, list(t, nil).Units, "a node with no pods")
}

// Devices a DRA driver allocated come as the driver names them, with the
// claim each container holds them through; other drivers' are left out;
// a claim reserved for two pods, and a device two claims each have a share
// of (consumable capacity), have both holders.
func TestDynamicResources(t *testing.T) {
	claim := func(ns, name string, rs ...*podresourcesapi.ClaimResource) *podresourcesapi.DynamicResource {
		return &podresourcesapi.DynamicResource{ClaimNamespace: ns, ClaimName: name, ClaimResources: rs}
	}
	res := func(driver, device string) *podresourcesapi.ClaimResource {
		return &podresourcesapi.ClaimResource{DriverName: driver, PoolName: "node-1", DeviceName: device,
			CdiDevices: []*podresourcesapi.CDIDevice{{Name: "k8s.gpu.nvidia.com/claim=x"}}}
	}
	share := func(r *podresourcesapi.ClaimResource, id string) *podresourcesapi.ClaimResource {
		r.ShareId = &id
		return r
	}
	withClaims := func(ns, name string, claims ...*podresourcesapi.DynamicResource) *podresourcesapi.PodResources {
		return &podresourcesapi.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesapi.ContainerResources{{Name: "c", DynamicResources: claims}}}
	}
	got := list(t, []string{"gpu.nvidia.com"},
		withClaims("ml", "train", claim("ml", "train-gpus", res("gpu.nvidia.com", "gpu-0"), res("gpu.nvidia.com", "gpu-3"))),
		withClaims("ml", "slice", claim("ml", "slice-mig", res("gpu.nvidia.com", "gpu-1-mig-1g10gb-19-6"))),
		withClaims("ml", "a", claim("ml", "shared", res("gpu.nvidia.com", "gpu-2"))),
		withClaims("ml", "b", claim("ml", "shared", res("gpu.nvidia.com", "gpu-2"))),
		withClaims("ml", "nic", claim("ml", "nic", res("dra.net", "eth1"))),
		// Consumable capacity: two claims, each with a share of one GPU.
		withClaims("ml", "c", claim("ml", "c-share", share(res("gpu.nvidia.com", "gpu-4"), "a1"))),
		withClaims("ml", "d", claim("ml", "d-share", share(res("gpu.nvidia.com", "gpu-4"), "b2"))),
	)
	on := func(name string) podresources.Device {
		return podresources.Device{Driver: "gpu.nvidia.com", Pool: "node-1", Name: name}
	}
	holder := func(pod, claim string) podresources.Container {
		return podresources.Container{Namespace: "ml", Pod: pod, Container: "c", Claim: podresources.Claim{Namespace: "ml", Name: claim}}
	}
	require.Equal(t, map[podresources.Device][]podresources.Container{
		on("gpu-0"):                 {holder("train", "train-gpus")},
		on("gpu-3"):                 {holder("train", "train-gpus")},
		on("gpu-1-mig-1g10gb-19-6"): {holder("slice", "slice-mig")},
		on("gpu-2"):                 {holder("a", "shared"), holder("b", "shared")},
		on("gpu-4"):                 {holder("c", "c-share"), holder("d", "d-share")},
	}, got.Devices)
	require.Empty(t, got.Units)
}

func TestListFailsWhenTheKubeletIsGone(t *testing.T) {
	c, err := podresources.Dial(filepath.Join(t.TempDir(), "none.sock"), 200*time.Millisecond)
	require.NoError(t, err, "dialing is lazy")
	defer c.Close()
	_, err = c.List(context.Background())
	require.ErrorContains(t, err, "pod-resources List")
}

// A kubelet that answers with a gRPC error (here: a gRPC server without
// the service, Unimplemented) is an error that carries gRPC's status.
func TestListFailsOnAGRPCError(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	c, err := podresources.Dial(socket, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.List(context.Background())
	require.ErrorContains(t, err, "pod-resources List: gRPC status 12: unknown service v1.PodResourcesLister")
}
