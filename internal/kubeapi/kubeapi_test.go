package kubeapi_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/internal/kubeapi"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
)

var ctx = context.Background()

func ptr[T any](v T) *T { return &v }

// grant gives the test user (kubetest.ReclaimerUser) the rule and nothing
// else, as the chart gives the exporter.
func grant(t *testing.T, admin kubernetes.Interface, rule rbacv1.PolicyRule) {
	t.Helper()
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "exporter"},
		Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "exporter"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "exporter"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubetest.ReclaimerUser}}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// On a real apiserver, with a user that may list ResourceSlices and nothing
// else (the exporter's role): the node's devices of the given drivers, by
// their uuid attribute; other nodes, other drivers and devices without one
// are left out, and anything else is refused.
func TestDeviceUUIDs(t *testing.T) {
	cl := kubetest.Start(t, false)
	admin := cl.Client(t, kubetest.AdminToken)
	grant(t, admin, rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}})
	slice := func(name, node, driver string, devices ...resourcev1.Device) {
		_, err := admin.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr(node), Devices: devices,
				Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	withUUID := func(name, uuid string) resourcev1.Device {
		return resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid": {StringValue: ptr(uuid)}, "type": {StringValue: ptr("gpu")}}}
	}
	slice("n1-gpu", "n1", "gpu.nvidia.com", withUUID("gpu-0", "GPU-0"), withUUID("h100-slot-b", "GPU-b"), resourcev1.Device{Name: "gpu-2"})
	slice("n1-nic", "n1", "nic.example.com", withUUID("nic-0", "NIC-0"))
	slice("n2-gpu", "n2", "gpu.nvidia.com", withUUID("gpu-0", "GPU-n2"))

	kubeconfig, err := cl.KubeconfigFor(kubetest.ReclaimerToken)
	require.NoError(t, err)
	api, err := kubeapi.New(kubeconfig)
	require.NoError(t, err)
	var got map[podresources.Device]string
	require.Eventually(t, func() bool {
		got, err = api.DeviceUUIDs(ctx, "n1", []string{"gpu.nvidia.com"})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the role binding takes effect")
	require.Equal(t, map[podresources.Device]string{
		{Driver: "gpu.nvidia.com", Pool: "n1", Name: "gpu-0"}:       "GPU-0",
		{Driver: "gpu.nvidia.com", Pool: "n1", Name: "h100-slot-b"}: "GPU-b",
	}, got)

	var pods map[string]any
	require.ErrorContains(t, api.Get(ctx, "/api/v1/pods", &pods), "403", "nothing but ResourceSlices")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err = kubeapi.New("")
	require.ErrorContains(t, err, "not in a pod", "no service account and no kubeconfig")
}

// On a real apiserver, with a user that may list pods: the node's pods
// alone, each with its UID, its containers' runtime ids and its keep mark.
func TestNodePods(t *testing.T) {
	cl := kubetest.Start(t, false)
	admin := cl.Client(t, kubetest.AdminToken)
	grant(t, admin, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := func(name, node string, annotations map[string]string) *corev1.Pod {
		p, err := admin.CoreV1().Pods("ml").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "train", Image: "x"}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return p
	}
	a := pod("a", "n1", map[string]string{"gpureclaim.io/keep": "true"})
	b := pod("b", "n1", nil)
	pod("elsewhere", "n2", nil)
	a.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "train", ContainerID: "containerd://abc123", Image: "x", ImageID: "x"}}
	_, err = admin.CoreV1().Pods("ml").UpdateStatus(ctx, a, metav1.UpdateOptions{})
	require.NoError(t, err)

	kubeconfig, err := cl.KubeconfigFor(kubetest.ReclaimerToken)
	require.NoError(t, err)
	api, err := kubeapi.New(kubeconfig)
	require.NoError(t, err)
	var got []podmeta.Pod
	require.Eventually(t, func() bool {
		got, err = api.NodePods(ctx, "n1")
		return err == nil && len(got) == 2 && len(got[0].Containers)+len(got[1].Containers) == 1
	}, 30*time.Second, 100*time.Millisecond, "the role binding takes effect and the status is seen")
	sort.Slice(got, func(i, j int) bool { return got[i].Name < got[j].Name })
	require.Equal(t, []podmeta.Pod{
		{Namespace: "ml", Name: "a", UID: string(a.UID), Keep: true, Containers: map[string]string{"abc123": "train"}},
		{Namespace: "ml", Name: "b", UID: string(b.UID), Containers: map[string]string{}},
	}, got)
}
