package podresources

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func pod(ns, name, container string, devs ...*podresourcesapi.ContainerDevices) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Namespace: ns, Name: name, Containers: []*podresourcesapi.ContainerResources{{Name: container, Devices: devs}}}
}

func dev(resource string, ids ...string) *podresourcesapi.ContainerDevices {
	return &podresourcesapi.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func TestListOverAUnixSocket(t *testing.T) {
	pods := []*podresourcesapi.PodResources{
		pod("a", "whole", "c", dev("nvidia.com/gpu", "GPU-1", "GPU-2")),
		pod("a", "slice", "c", dev("nvidia.com/mig-1g.10gb", "MIG-1")),
		pod("b", "replica-0", "c", dev("nvidia.com/gpu", "GPU-3::0")),
		pod("b", "replica-1", "c", dev("nvidia.com/gpu.shared", "GPU-3::1")),
		pod("b", "nic", "c", dev("rdma/hca", "mlx5_0")),
	}
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	srv, err := Serve(socket, func() []*podresourcesapi.PodResources { return pods })
	require.NoError(t, err)
	defer srv.Stop()
	c, err := Dial(socket, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()

	got, err := c.List(context.Background())
	require.NoError(t, err)
	require.Equal(t, Allocations{
		"GPU-1": {{"a", "whole", "c"}},
		"GPU-2": {{"a", "whole", "c"}},
		"MIG-1": {{"a", "slice", "c"}},
		"GPU-3": {{"b", "replica-0", "c"}, {"b", "replica-1", "c"}},
	}, got, "replicas count for their GPU; other resources are ignored")
}

func TestListFailsWhenTheKubeletIsGone(t *testing.T) {
	c, err := Dial(filepath.Join(t.TempDir(), "none.sock"), 200*time.Millisecond)
	require.NoError(t, err, "dialing is lazy")
	defer c.Close()
	_, err = c.List(context.Background())
	require.ErrorContains(t, err, "pod-resources List")
}
