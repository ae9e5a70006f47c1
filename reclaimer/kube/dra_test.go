package kube_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// draNode publishes what NVIDIA's DRA driver's kubelet plugin would for a
// node with two GPUs: a DeviceClass of its driver and the node's
// ResourceSlice, its devices named as the driver names them.
func draNode(t *testing.T, admin kubernetes.Interface) {
	driver := names.DRADrivers[0]
	_, err := admin.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var devices []resourcev1.Device
	for i, name := range []string{"gpu-0", "gpu-1"} {
		uuid := "GPU-dra-" + name
		devices = append(devices, resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"uuid": {StringValue: &uuid}, "minor": {IntValue: ptr(int64(i))}}})
	}
	_, err = admin.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: gpuNode + "-" + driver},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr(gpuNode), Devices: devices,
			Pool: resourcev1.ResourcePool{Name: gpuNode, Generation: 1, ResourceSliceCount: 1}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// draPodSpec asks for a GPU through a claim: from the template when
// claim is "", else the shared claim of that name.
func draPodSpec(claim string) corev1.PodSpec {
	rc := corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr("one-gpu")}
	if claim != "" {
		rc = corev1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr(claim)}
	}
	return corev1.PodSpec{
		Tolerations:    []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		ResourceClaims: []corev1.PodResourceClaim{rc},
		Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/gpu:1",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
	}
}

// TestDRAClaims stops workloads that hold GPUs through ResourceClaims,
// allocated by the real scheduler from a node's ResourceSlice, with the
// real resource claim controller: a Job's pod with a claim from a template
// (done once the claim is deallocated, and a pending pod then gets the
// GPU), and a Deployment on a shared claim another pod also uses (the
// owner is told before; done once its pods are gone, its share freed, and
// the GPU said to stay with the other pod).
func TestDRAClaims(t *testing.T) {
	cl := kubetest.Start(t, true)
	admin := cl.Client(t, kubetest.AdminToken)
	bindReclaimerRole(t, cl)
	kwokGPUNode(t, admin)
	draNode(t, admin)
	ns := namespace(t, admin, "dra", nil)
	_, err := admin.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: names.DRADrivers[0]}}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: names.DRADrivers[0]}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	job := draPodSpec("")
	job.RestartPolicy = corev1.RestartPolicyNever
	_, err = admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: job}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	labels := map[string]string{"app": "serve"}
	_, err = admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "serve"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: draPodSpec("shared")}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "viewer"}, Spec: draPodSpec("shared")}, metav1.CreateOptions{})
	require.NoError(t, err)

	running := func(selector string) []string {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		require.NoError(t, err)
		var out []string
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out = append(out, p.Name)
			}
		}
		return out
	}
	var trainPod, servePod string
	require.Eventually(t, func() bool {
		tp, sp := running("job-name=train"), running("app=serve")
		if len(tp) != 1 || len(sp) != 1 || len(running("")) != 3 {
			return false
		}
		trainPod, servePod = tp[0], sp[0]
		return true
	}, 2*time.Minute, 200*time.Millisecond, "the scheduler allocates both GPUs: one to the Job's claim, one to the shared claim")
	allocated := func(claim string) string {
		rc, err := admin.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && rc.Status.Allocation == nil) {
			return ""
		}
		require.NoError(t, err)
		return rc.Status.Allocation.Devices.Results[0].Device
	}
	require.NotEmpty(t, allocated("shared"))
	// Both GPUs are taken: a third pod waits for one.
	_, err = admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waiter", Labels: map[string]string{"app": "waiter"}}, Spec: draPodSpec("")}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Never(t, func() bool { return len(running("app=waiter")) > 0 }, 3*time.Second, 200*time.Millisecond, "no GPU is free")

	kc := newClient(t, cl, time.Now, kube.Options{})
	eng, notifier := runEngine(ctx, t, kc, `
release: {timeout: 2m, interval: 1s}
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 1s, min_runtime: 0s}]
`)

	ended := func(pod string) *reclaim.Reclaim {
		return endedReclaim(t, eng, func(r *reclaim.Reclaim) bool { return r.Target.Pod == pod }, 2*time.Minute)
	}

	t.Run("a claim from a template: done once it is deallocated, and a pending pod gets the GPU", func(t *testing.T) {
		claim := ""
		p, err := admin.CoreV1().Pods(ns).Get(ctx, trainPod, metav1.GetOptions{})
		require.NoError(t, err)
		claim = *p.Status.ResourceClaimStatuses[0].ResourceClaimName
		device := allocated(claim)
		require.NotEmpty(t, device)

		_, err = eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", time.Now(), ns, trainPod, "node", gpuNode, "uuid", "GPU-dra-"+device, "gpu_uuid", "GPU-dra-"+device)})
		require.NoError(t, err)
		r := ended(trainPod)
		require.Equal(t, reclaim.Done, r.State, r.Reason)
		require.Equal(t, []reclaim.Claim{{Namespace: ns, Name: claim}}, r.TopOwner.Claims)
		require.Contains(t, r.Detail, "Job dra/train")
		require.Empty(t, r.SharedWith)
		require.Empty(t, allocated(claim), "done: the claim's device is deallocated")
		require.Eventually(t, func() bool { return len(running("app=waiter")) == 1 }, time.Minute, 200*time.Millisecond, "the pending pod gets the GPU")
		require.Equal(t, device, allocated(*podClaim(t, admin, ns, "waiter")), "the freed GPU")
	})

	t.Run("a shared claim: the owner is told, its share is freed, and the GPU stays with the other pod", func(t *testing.T) {
		_, err = eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", time.Now(), ns, servePod, "node", gpuNode, "uuid", "GPU-shared", "gpu_uuid", "GPU-shared")})
		require.NoError(t, err)
		r := ended(servePod)
		require.Equal(t, reclaim.Done, r.State, r.Reason)
		require.Equal(t, []reclaim.Claim{{Namespace: ns, Name: "shared", Shared: true, Others: []string{"pod dra/viewer"}}}, r.TopOwner.Claims)
		require.Contains(t, notifier.Text(reclaim.MsgWarning), "It shares ResourceClaim dra/shared with pod dra/viewer: stopping it frees its share")
		require.Equal(t, "ResourceClaim dra/shared is reserved for pod dra/viewer", r.SharedWith)
		require.Eventually(t, func() bool {
			return strings.Contains(notifier.Text(reclaim.MsgReclaimed), "Its share is freed; the GPU stays held: ResourceClaim dra/shared is reserved for pod dra/viewer.")
		}, 10*time.Second, 100*time.Millisecond, "the owner is told the GPU stays held")
		require.Empty(t, running("app=serve"), "the Deployment is scaled down")
		require.NotEmpty(t, allocated("shared"), "the viewer keeps the GPU")
	})
}

func podClaim(t *testing.T, admin kubernetes.Interface, ns, pod string) *string {
	p, err := admin.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, p.Status.ResourceClaimStatuses)
	return p.Status.ResourceClaimStatuses[0].ResourceClaimName
}
