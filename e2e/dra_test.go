package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// nodeCScenario is a node whose GPUs NVIDIA's DRA driver allocates: the
// simulated kubelet reports the claims the scheduler allocated. Its GPU 1
// falls off the bus 5 scenario minutes in.
const nodeCScenario = `node: gpu-c
system: dgxh100
allocation: dra
pods:
  - {name: share-a, namespace: dra-shared, container: main, claim: shared-gpu, annotations: {gpureclaim.io/owner: U0HEIDI}}
  - {name: share-b, namespace: dra-shared, container: main, claim: shared-gpu, annotations: {gpureclaim.io/owner: U0HEIDI}}
gpus:
  - {index: 0, sm_active: 0}
  - {index: 1, lost_after: 5m}
  # One ResourceClaim reserved for two pods: share-a works, share-b's own
  # process does nothing.
  - index: 2
    sm_active: 0.6
    pods: [share-a, share-b]
    processes:
      - {pid: 4001, pod: share-a, memory_used: 20GiB, sm_util: 0.6, started: -3h}
      - {pid: 4002, pod: share-b, memory_used: 10GiB, sm_util: 0, started: -3h}
`

// deploySharedClaim makes the pods of gpu-c's shared GPU real pods on
// gpu-c, both using the one ResourceClaim the node reports them to hold
// GPU 2 through.
func (su *suite) deploySharedClaim() {
	admin, driver := su.s.Admin, names.DRADrivers[0]
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dra-shared"}}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	_, err = admin.ResourceV1().ResourceClaims("dra-shared").Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared-gpu"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driver}}}}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	for _, name := range []string{"share-a", "share-b"} {
		spec := draPodSpec()
		spec.NodeName = "gpu-c"
		spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr("shared-gpu")}}
		_, err := admin.CoreV1().Pods("dra-shared").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name,
			Annotations: map[string]string{"gpureclaim.io/owner": "U0HEIDI"}}, Spec: spec}, metav1.CreateOptions{})
		require.NoError(su.t, err)
	}
}

// deployDRAJob publishes, as the DRA driver's kubelet plugin would, gpu-c's
// GPU 0 in a ResourceSlice (named as the driver names it), runs an idle
// training Job that asks for a GPU through a ResourceClaimTemplate, and
// returns its pod.
func (su *suite) deployDRAJob() string {
	admin, driver := su.s.Admin, names.DRADrivers[0]
	_, err := admin.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{
			CEL: &resourcev1.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	_, err = admin.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-c-" + driver},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr("gpu-c"), Devices: []resourcev1.Device{{Name: "gpu-0"}},
			Pool: resourcev1.ResourcePool{Name: "gpu-c", Generation: 1, ResourceSliceCount: 1}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dra"}}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	_, err = admin.ResourceV1().ResourceClaimTemplates("dra").Create(ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-gpu"},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: driver}}}}}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	_, err = admin.BatchV1().Jobs("dra").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "finetune"},
		Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gpureclaim.io/owner": "U0GRACE"}}, Spec: draPodSpec()}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	return su.onePod("dra", "batch.kubernetes.io/job-name=finetune")
}

// draWaiter is a pod that waits for a GPU on gpu-c, once the Job holds it.
func (su *suite) draWaiter() {
	spec := draPodSpec()
	_, err := su.s.Admin.CoreV1().Pods("dra").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waiter", Labels: map[string]string{"app": "waiter"}}, Spec: spec}, metav1.CreateOptions{})
	require.NoError(su.t, err)
}

// draPodSpec asks for one GPU through a claim from the template one-gpu.
func draPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		Tolerations:    []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("one-gpu")}},
		Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/gpu-workload:1",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		RestartPolicy: corev1.RestartPolicyNever,
	}
}

// idleDRAJob: the exporter attributes the DRA-allocated GPU to the Job's
// pod and claim; the Job is suspended, the reclaim done once the claim is
// deallocated, and the waiting pod then gets the GPU.
func (su *suite) idleDRAJob(t *testing.T) {
	uuid, p := su.unitUUID("gpu-c", 0, ""), su.draPod
	r := su.waitState("finetune", pod("dra", p), "done", 90*time.Second)
	require.Equal(t, config.ActionStop, r.Action)
	require.Contains(t, r.Reason, "the GPU was seen released")
	owner, err := su.s.Query(ctx, `last_over_time(gpureclaim_unit_owner_info{uuid="`+uuid+`", pod="`+p+`", claim_namespace="dra", claim=~"`+p+`-gpu-.+"}[10m])`)
	require.NoError(t, err)
	require.Len(t, owner, 1, "the exporter attributed the GPU to the pod through its claim")
	require.Equal(t, uuid, owner[0]["uuid"])
	claims, err := su.s.Admin.ResourceV1().ResourceClaims("dra").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, c := range claims.Items {
		require.NotContains(t, c.Name, p, "the Job pod's claim is gone")
	}
	require.Eventually(t, func() bool {
		o, err := su.s.Query(ctx, `gpureclaim_unit_owner_info{pod="waiter"}`)
		return err == nil && len(o) == 1 && o[0]["uuid"] == uuid
	}, 60*time.Second, 200*time.Millisecond, "the waiting pod gets the GPU, and the exporter sees it")
	w, err := su.s.Admin.CoreV1().Pods("dra").Get(ctx, "waiter", metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range w.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			require.False(t, c.LastTransitionTime.Time.Before(r.ActedAt.Truncate(time.Second)), "the waiter was scheduled only once the Job was stopped")
		}
	}
	su.timing("idle DRA Job → suspended, claim freed", su.started, r.Warning.At, time.Now())
}

// lostGPU: a GPU whose handle NVML can no longer give stays exported, down,
// under its last known UUID, and GPUUnreadable fires for it.
func (su *suite) lostGPU(t *testing.T) {
	var uuid string
	require.Eventually(t, func() bool {
		r, err := su.s.Query(ctx, `gpureclaim_gpu_up == 0 and on(gpu_uuid) gpureclaim_gpu_info{node="gpu-c", gpu_index="1"}`)
		if err != nil || len(r) != 1 {
			return false
		}
		uuid = r[0]["gpu_uuid"]
		return true
	}, 60*time.Second, 200*time.Millisecond, "the lost GPU is exported as down")
	require.NotEmpty(t, uuid, "under its last known UUID")
	require.Eventually(t, func() bool {
		r, err := su.s.Query(ctx, `ALERTS{alertname="GPUUnreadable", alertstate="firing", gpu_uuid="`+uuid+`"}`)
		return err == nil && len(r) == 1
	}, 60*time.Second, 200*time.Millisecond, "GPUUnreadable fires")
}
