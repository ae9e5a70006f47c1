package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var (
	notebooks         = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "notebooks"}
	inferenceServices = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1beta1", Resource: "inferenceservices"}
	crds              = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// The Kubeflow Notebook's annotation that its controller honours.
const notebookStopped = "kubeflow-resource-stopped"

// deployJob runs an idle training Job on gpu-b and returns its pod, which
// the Job controller names.
func (su *suite) deployJob() string {
	admin := su.s.Admin
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "batch"}}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	spec := stack.PodSpec("gpu-b", 1)
	spec.RestartPolicy = corev1.RestartPolicyNever
	_, err = admin.BatchV1().Jobs("batch").Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "train-7"},
		Spec: batchv1.JobSpec{Parallelism: ptr(int32(1)), Completions: ptr(int32(1)),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"gpureclaim.io/owner": "U0FRANK"}}, Spec: spec}},
	}, metav1.CreateOptions{})
	require.NoError(su.t, err)
	return su.onePod("batch", "batch.kubernetes.io/job-name=train-7")
}

// deployNotebook makes a Kubeflow Notebook the way its controller lays it
// out (a StatefulSet of one pod, owned by the Notebook) and starts a stand-in
// for the notebook controller's stop handling: the real one is not built
// here. It returns the notebook's pod.
func (su *suite) deployNotebook() string {
	t := su.t
	dyn := su.installCRD("notebook.yaml")
	admin := su.s.Admin
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "notebooks"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	want := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "Notebook",
		"metadata": map[string]any{"name": "alice", "namespace": "notebooks", "annotations": map[string]any{"gpureclaim.io/owner": "U0ALICE"}},
		"spec":     map[string]any{"template": map[string]any{}}}}
	var nb *unstructured.Unstructured
	require.Eventually(t, func() bool { // the CRD is served once established
		nb, err = dyn.Resource(notebooks).Namespace("notebooks").Create(ctx, want.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			t.Logf("creating the Notebook: %v", err)
		}
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "the Notebook is created")
	labels := map[string]string{"notebook-name": "alice"}
	_, err = admin.AppsV1().StatefulSets("notebooks").Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "alice", OwnerReferences: []metav1.OwnerReference{{APIVersion: "kubeflow.org/v1", Kind: "Notebook", Name: "alice", UID: nb.GetUID(), Controller: ptr(true)}}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(1)), ServiceName: "alice", Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: stack.PodSpec("gpu-b", 1)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The stand-in: the StatefulSet has 0 replicas while the Notebook
	// carries the stop annotation, 1 otherwise, as the notebook controller keeps it.
	standIn, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go func() {
		for standIn.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			u, err := dyn.Resource(notebooks).Namespace("notebooks").Get(standIn, "alice", metav1.GetOptions{})
			if err != nil {
				continue
			}
			want := 1
			if _, ok := u.GetAnnotations()[notebookStopped]; ok {
				want = 0
			}
			sts, err := admin.AppsV1().StatefulSets("notebooks").Get(standIn, "alice", metav1.GetOptions{})
			if err != nil || int(*sts.Spec.Replicas) == want {
				continue
			}
			_, _ = admin.AppsV1().StatefulSets("notebooks").Patch(standIn, "alice", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, want), metav1.PatchOptions{})
		}
	}()
	return su.onePod("notebooks", "notebook-name=alice")
}

// deployInferenceService makes a KServe InferenceService the way KServe
// lays out a raw deployment (a Deployment owned by it) with no KServe
// controller running: nothing acts on its stop annotation. It returns the
// predictor's pod.
func (su *suite) deployInferenceService() string {
	t := su.t
	dyn := su.installCRD("inferenceservice.yaml")
	admin := su.s.Admin
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kserve"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	want := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
		"metadata": map[string]any{"name": "chat-llm", "namespace": "kserve", "annotations": map[string]any{"gpureclaim.io/owner": "U0ERIN"}},
		"spec":     map[string]any{"predictor": map[string]any{}}}}
	var isvc *unstructured.Unstructured
	require.Eventually(t, func() bool {
		isvc, err = dyn.Resource(inferenceServices).Namespace("kserve").Create(ctx, want.DeepCopy(), metav1.CreateOptions{})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "the InferenceService is created")
	labels := map[string]string{"app": "chat-llm"}
	_, err = admin.AppsV1().Deployments("kserve").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "chat-llm-predictor", OwnerReferences: []metav1.OwnerReference{{APIVersion: "serving.kserve.io/v1beta1", Kind: "InferenceService", Name: "chat-llm", UID: isvc.GetUID(), Controller: ptr(true)}}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: stack.PodSpec("gpu-b", 1)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return su.onePod("kserve", "app=chat-llm")
}

// installCRD creates one of the reclaimer's test CRDs.
func (su *suite) installCRD(file string) dynamic.Interface {
	t := su.t
	dyn, err := dynamic.NewForConfig(su.s.Cluster.RESTConfig(cluster.AdminToken))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(tooltest.Root(t), "reclaimer", "kube", "testdata", "crds", file))
	require.NoError(t, err)
	var crd map[string]any
	require.NoError(t, yaml.Unmarshal(b, &crd))
	_, err = dyn.Resource(crds).Create(ctx, &unstructured.Unstructured{Object: crd}, metav1.CreateOptions{})
	require.NoError(t, err)
	return dyn
}

// ignoredStop: the InferenceService's stop annotation is written, nothing
// acts on it, and the reclaim ends not released, saying what holds the GPU,
// with the stop taken back; the owner hears it, the status page shows it.
func (su *suite) ignoredStop(t *testing.T) {
	r := su.waitState("chat-llm", func(x *reclaim.Reclaim) bool { return x.Target.Namespace == "kserve" }, "not_released", 120*time.Second)
	require.Equal(t, config.ActionStop, r.Action)
	require.Equal(t, "InferenceService kserve/chat-llm stopped", r.Detail)
	require.Contains(t, r.Reason, "the GPU is still held: held by pod kserve/"+r.Target.Pod+" (Running)")
	require.True(t, r.ReleasedAt.IsZero())
	require.False(t, su.podGone("kserve", r.Target.Pod), "nothing acted on the stop")
	// The stop is taken back, so that a KServe installed later does not
	// carry it out with nobody told.
	require.Contains(t, r.Reason, "the stop was taken back")
	dyn, err := dynamic.NewForConfig(su.s.Cluster.RESTConfig(cluster.AdminToken))
	require.NoError(t, err)
	isvc, err := dyn.Resource(inferenceServices).Namespace("kserve").Get(ctx, "chat-llm", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, isvc.GetAnnotations(), "serving.kserve.io/stop", "the stop is no longer written")
	require.Eventually(t, func() bool {
		return strings.Contains(headers(su.slack.Updates(), "D0ERIN"), "GPU not released")
	}, 30*time.Second, 200*time.Millisecond, "the owner is told the GPU is still held")
	require.Eventually(t, func() bool {
		return strings.Contains(su.s.Log("reclaimer"), "was not released")
	}, 30*time.Second, 200*time.Millisecond, "the admins' log says so")
	req, _ := http.NewRequest(http.MethodGet, su.s.ReclaimerURL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(page), "not_released")
	require.Contains(t, string(page), "InferenceService kserve/chat-llm stopped")
}

func (su *suite) onePod(ns, selector string) string {
	var name string
	require.Eventually(su.t, func() bool {
		pods, err := su.s.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		name = pods.Items[0].Name
		return true
	}, 60*time.Second, 100*time.Millisecond, "the controller creates the pod of %s", selector)
	return name
}

// livePods lists the pods of a selector that are not being deleted.
func (su *suite) livePods(ns, selector string) []corev1.Pod {
	pods, err := su.s.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(su.t, err)
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// allRunning says whether every pod in ns runs.
func (su *suite) allRunning(ns string) bool {
	for _, p := range su.livePods(ns, "") {
		if p.Status.Phase != corev1.PodRunning {
			return false
		}
	}
	return true
}

func (su *suite) restore(t *testing.T, id string) {
	req, _ := http.NewRequest(http.MethodPost, su.s.ReclaimerURL+"/api/v1/reclaims/"+id+"/restore", nil)
	req.Header.Set("Authorization", "Bearer "+stack.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func (su *suite) idleJob(t *testing.T) {
	r := su.waitState("train-7", func(x *reclaim.Reclaim) bool { return x.Target.Namespace == "batch" }, "done", 90*time.Second)
	require.Equal(t, config.ActionStop, r.Action)
	require.Equal(t, "Job batch/train-7 suspended", r.Detail)
	job, err := su.s.Admin.BatchV1().Jobs("batch").Get(ctx, "train-7", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, *job.Spec.Suspend)
	su.waitPodGone(t, "batch", r.Target.Pod)
	freed := su.freed(r.Target.UUID)
	require.Empty(t, su.livePods("batch", "batch.kubernetes.io/job-name=train-7"), "the Job controller started no other pod")
	require.Contains(t, headers(su.slack.Posts(), "D0FRANK"), "Idle GPU: it will be reclaimed")
	su.timing("idle Job → suspended", su.started, r.Warning.At, freed)

	su.restore(t, r.ID)
	require.Eventually(t, func() bool {
		return len(su.livePods("batch", "batch.kubernetes.io/job-name=train-7")) == 1
	}, 60*time.Second, 200*time.Millisecond, "resumed: the Job starts a pod again")
	job, _ = su.s.Admin.BatchV1().Jobs("batch").Get(ctx, "train-7", metav1.GetOptions{})
	require.False(t, *job.Spec.Suspend)
}

func (su *suite) idleNotebook(t *testing.T) {
	r := su.waitState("alice", func(x *reclaim.Reclaim) bool { return x.Target.Namespace == "notebooks" }, "done", 90*time.Second)
	require.Equal(t, config.ActionStop, r.Action)
	require.Equal(t, "Notebook notebooks/alice stopped", r.Detail)
	dyn, err := dynamic.NewForConfig(su.s.Cluster.RESTConfig(cluster.AdminToken))
	require.NoError(t, err)
	nb, err := dyn.Resource(notebooks).Namespace("notebooks").Get(ctx, "alice", metav1.GetOptions{})
	require.NoError(t, err)
	require.Contains(t, nb.GetAnnotations(), notebookStopped)
	su.waitPodGone(t, "notebooks", "alice-0")
	su.timing("idle Notebook → stopped", su.started, r.Warning.At, su.freed(r.Target.UUID))
	sts, err := su.s.Admin.AppsV1().StatefulSets("notebooks").Get(ctx, "alice", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 0, *sts.Spec.Replicas)

	su.restore(t, r.ID)
	nb, err = dyn.Resource(notebooks).Namespace("notebooks").Get(ctx, "alice", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotContains(t, nb.GetAnnotations(), notebookStopped)
	require.Eventually(t, func() bool { return len(su.livePods("notebooks", "notebook-name=alice")) == 1 }, 60*time.Second, 200*time.Millisecond, "started again")
}
