package kube_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/operatortest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

// kubeActor is the reclaimer's Kubernetes routing, for an engine that acts
// on pods only.
type kubeActor struct{ *kube.Client }

func (a kubeActor) Act(ctx context.Context, action config.Action, r *reclaim.Reclaim) (reclaim.Result, error) {
	switch action {
	case config.ActionStop:
		return a.Stop(ctx, r)
	case config.ActionScaleDown:
		return a.ScaleDown(ctx, r, 0)
	case config.ActionEvict:
		return a.Evict(ctx, r)
	}
	return reclaim.Result{}, fmt.Errorf("action %s is not for Kubernetes", action)
}

const gpuNode = "gpu-node-1"

// kwokGPUNode is a fake node with 16 GPUs that kwok runs pods on.
func kwokGPUNode(t *testing.T, admin kubernetes.Interface) {
	caps := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("16"), corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"), corev1.ResourcePods: resource.MustParse("110")}
	_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: gpuNode, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}, Labels: map[string]string{"kubernetes.io/hostname": gpuNode}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status:     corev1.NodeStatus{Capacity: caps, Allocatable: caps},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// gpuPodTemplate is a pod template asking for one GPU on the fake node.
func gpuPodTemplate(container string) map[string]any {
	return map[string]any{"spec": map[string]any{
		"tolerations": []any{map[string]any{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}},
		"containers": []any{map[string]any{"name": container, "image": "registry.example.com/gpu:1",
			"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "1"}}}},
	}}
}

// runEngine runs an engine on a fresh store with the config's policies,
// acting through kc, until the test ends; the notifier hears everything.
func runEngine(ctx context.Context, t *testing.T, kc *kube.Client, yaml string) (*lifecycle.Engine, *reclaimtest.Notifier) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	notifier := reclaimtest.NewNotifier("test")
	eng, err := lifecycle.New(lifecycle.Options{
		Config: reclaimtest.Config(t, yaml), Store: st, Journal: st, Inspector: kc, Actor: kubeActor{kc}, Restorer: kubeActor{kc}, Verifier: kubeActor{kc}, Events: kc,
		Notifiers: []reclaim.Notifier{notifier}, Clock: time.Now,
	})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go eng.Run(runCtx, 200*time.Millisecond)
	return eng, notifier
}

// endedReclaim waits until the engine's reclaim that pick chooses has ended.
func endedReclaim(t *testing.T, eng *lifecycle.Engine, pick func(*reclaim.Reclaim) bool, within time.Duration) *reclaim.Reclaim {
	t.Helper()
	var r *reclaim.Reclaim
	require.Eventually(t, func() bool {
		for _, x := range eng.List() {
			if pick(x) && x.State.Terminal() {
				r = x
				return true
			}
		}
		return false
	}, within, 200*time.Millisecond, "the reclaim ends")
	return r
}

// gpuPods are the pods in a namespace that hold a GPU on the node.
func gpuPods(t *testing.T, admin kubernetes.Interface, ns string, running bool) []string {
	l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + gpuNode})
	require.NoError(t, err)
	var out []string
	for _, p := range l.Items {
		if _, ok := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; !ok || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if running && (p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil) {
			continue
		}
		out = append(out, p.Name)
	}
	return out
}

func kueueQueues(t *testing.T, dyn dynamic.Interface, namespaces []string) {
	gvr := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: r}
	}
	create := func(r, ns string, obj map[string]any) {
		_, err := dyn.Resource(gvr(r)).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		require.NoError(t, err, r)
	}
	create("resourceflavors", "", map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": map[string]any{"name": "default"}})
	create("clusterqueues", "", map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": map[string]any{"name": "gpus"},
		"spec": map[string]any{"namespaceSelector": map[string]any{}, "resourceGroups": []any{map[string]any{
			"coveredResources": []any{"cpu", "memory", "nvidia.com/gpu"},
			"flavors": []any{map[string]any{"name": "default", "resources": []any{
				map[string]any{"name": "cpu", "nominalQuota": "100"}, map[string]any{"name": "memory", "nominalQuota": "1000Gi"},
				map[string]any{"name": "nvidia.com/gpu", "nominalQuota": "8"}}}},
		}}}})
	for _, ns := range namespaces {
		create("localqueues", ns, map[string]any{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": map[string]any{"name": "gpus", "namespace": ns},
			"spec": map[string]any{"clusterQueue": "gpus"}})
	}
}

// TestStopsUnderRealControllers runs each stop through the reclaimer's
// engine against the controllers that own the workload, built from the
// module proxy at the pinned versions: an idle GPU pod is warned, its top
// owner stopped, and the reclaim is done only once no GPU pod of the
// workload is left on the node; none comes back for a minute; a restore is
// restored once a pod runs again. Where the controller ignores the stop
// (here no KServe or JobSet controller runs at all), the reclaim ends
// not released with what still holds the GPU.
func TestStopsUnderRealControllers(t *testing.T) {
	cl := kubetest.Start(t, true)
	operatortest.Start(t, cl)
	cl.InstallCRDs(t, "testdata/crds")
	admin := cl.Client(t, kubetest.AdminToken)
	bindReclaimerRole(t, cl)
	dyn, err := dynamic.NewForConfig(cl.RESTConfig(kubetest.AdminToken))
	require.NoError(t, err)
	kwokGPUNode(t, admin)

	kc := newClient(t, cl, time.Now, kube.Options{Kueue: true})
	eng, _ := runEngine(ctx, t, kc, `
release: {timeout: 3m, interval: 1s, timeouts: {InferenceService: 20s, JobSet: 20s, Notebook: 20s, LeaderWorkerSet: 20s}}
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 1s, min_runtime: 0s}]
`)

	o := func(ns string) *objects { return &objects{t: t, dyn: dyn, cs: admin, ns: ns} }
	kueueLabel := map[string]any{"labels": map[string]any{config.KueueQueueLabel: "gpus"}}
	rayHead := map[string]any{"rayStartParams": map[string]any{}, "template": gpuPodTemplate("ray-head")}
	rayJob := func(extra map[string]any) map[string]any {
		spec := map[string]any{"entrypoint": "python train.py", "rayClusterSpec": map[string]any{"headGroupSpec": rayHead}}
		for k, v := range extra {
			spec[k] = v
		}
		return spec
	}
	pytorch := func(suspend bool) map[string]any {
		return map[string]any{"runPolicy": map[string]any{"suspend": suspend}, "pytorchReplicaSpecs": map[string]any{
			"Master": map[string]any{"replicas": int64(1), "restartPolicy": "OnFailure", "template": gpuPodTemplate("pytorch")}}}
	}
	job := func() map[string]any {
		tmpl := gpuPodTemplate("train")
		tmpl["spec"].(map[string]any)["restartPolicy"] = "Never"
		return map[string]any{"suspend": true, "parallelism": int64(1), "completions": int64(1), "template": tmpl}
	}
	// noController is what a controller that is not running here would
	// have made: a Deployment under the top owner, which the controller
	// manager runs.
	noController := func(o *objects, apiVersion, kind, resource, name string, spec map[string]any) {
		top := o.create(apiVersion, kind, resource, name, nil, spec, nil)
		o.create("apps/v1", "Deployment", "deployments", name+"-x", top, map[string]any{"replicas": int64(1),
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": name}}, "spec": gpuPodTemplate("main")["spec"]}}, nil)
	}

	cases := []struct {
		name, controller string
		create           func(o *objects)
		stopped          string // what the reclaim says it stopped
		want             reclaim.State
		why              string // in the not-released reason
	}{
		{"RayCluster: suspended", operatortest.KubeRay, func(o *objects) {
			o.create("ray.io/v1", "RayCluster", "rayclusters", "lab", nil, map[string]any{"headGroupSpec": rayHead}, nil)
		}, "RayCluster %s/lab suspended", reclaim.Done, ""},
		{"RayJob, shutdownAfterJobFinishes false: its RayCluster suspended", operatortest.KubeRay, func(o *objects) {
			o.create("ray.io/v1", "RayJob", "rayjobs", "sweep", nil, rayJob(nil), nil)
		}, "RayCluster %s/sweep-", reclaim.Done, ""},
		{"RayJob, shutdownAfterJobFinishes true, Running: suspended", operatortest.KubeRay, func(o *objects) {
			o.create("ray.io/v1", "RayJob", "rayjobs", "train", nil, rayJob(map[string]any{"shutdownAfterJobFinishes": true}), nil)
		}, "RayJob %s/train suspended", reclaim.Done, ""},
		{"RayJob in InteractiveMode, Waiting: its RayCluster suspended", operatortest.KubeRay, func(o *objects) {
			o.create("ray.io/v1", "RayJob", "rayjobs", "chat", nil, rayJob(map[string]any{"submissionMode": "InteractiveMode", "shutdownAfterJobFinishes": true}), nil)
		}, "RayCluster %s/chat-", reclaim.Done, ""},
		{"PyTorchJob: suspended", operatortest.TrainingOperator, func(o *objects) {
			o.create("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "bert", nil, pytorch(false), nil)
		}, "PyTorchJob %s/bert suspended", reclaim.Done, ""},
		{"Job admitted by Kueue: its Workload deactivated", operatortest.Kueue, func(o *objects) {
			o.create("batch/v1", "Job", "jobs", "train", nil, job(), kueueLabel)
		}, "Job %s/train stopped: Kueue Workload", reclaim.Done, ""},
		{"RayJob admitted by Kueue: its Workload deactivated", operatortest.Kueue + ", " + operatortest.KubeRay, func(o *objects) {
			spec := rayJob(map[string]any{"shutdownAfterJobFinishes": true, "suspend": true})
			o.create("ray.io/v1", "RayJob", "rayjobs", "tune", nil, spec, kueueLabel)
		}, "RayJob %s/tune stopped: Kueue Workload", reclaim.Done, ""},
		{"PyTorchJob admitted by Kueue: its Workload deactivated", operatortest.Kueue + ", " + operatortest.TrainingOperator, func(o *objects) {
			o.create("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "llm", nil, pytorch(true), kueueLabel)
		}, "PyTorchJob %s/llm stopped: Kueue Workload", reclaim.Done, ""},
		{"InferenceService without its controller: not released", "none", func(o *objects) {
			noController(o, "serving.kserve.io/v1beta1", "InferenceService", "inferenceservices", "chat", map[string]any{"predictor": map[string]any{}})
		}, "InferenceService %s/chat stopped", reclaim.NotReleased, "the GPU is still held: held by pod %s/chat-x-"},
		{"JobSet without its controller: not released", "none", func(o *objects) {
			noController(o, "jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", "sweep", map[string]any{"replicatedJobs": []any{}})
		}, "JobSet %s/sweep suspended", reclaim.NotReleased, "the GPU is still held: held by pod %s/sweep-x-"},
		{"Notebook without its controller: not released", "none", func(o *objects) {
			noController(o, "kubeflow.org/v1", "Notebook", "notebooks", "alice", map[string]any{"template": map[string]any{}})
		}, "Notebook %s/alice stopped", reclaim.NotReleased, "the GPU is still held: held by pod %s/alice-x-"},
		{"LeaderWorkerSet without its controller: not released", "none", func(o *objects) {
			noController(o, "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets", "lws", map[string]any{"replicas": int64(1)})
		}, "LeaderWorkerSet %s/lws scaled from 1 to 0 replicas", reclaim.NotReleased, "the GPU is still held: held by pod %s/lws-x-"},
	}
	var namespaces []string
	for i := range cases {
		namespaces = append(namespaces, fmt.Sprintf("case-%d", i))
		namespace(t, admin, namespaces[i], nil)
	}
	kueueQueues(t, dyn, namespaces)

	// Every case at once: they wait on controllers, not on the CPUs, and
	// t.Run from several goroutines is not held to -parallel.
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, tc := range cases {
		ns := namespaces[i]
		wg.Add(1)
		go t.Run(tc.name, func(t *testing.T) {
			defer wg.Done()
			tc.create(o(ns))
			var pod string
			require.Eventually(t, func() bool {
				if ps := gpuPods(t, admin, ns, true); len(ps) > 0 {
					pod = ps[0]
					return true
				}
				return false
			}, 3*time.Minute, 500*time.Millisecond, "%s runs a GPU pod", tc.controller)

			_, err := eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", time.Now(), ns, pod, "node", gpuNode, "uuid", "GPU-"+ns, "gpu_uuid", "GPU-"+ns)})
			require.NoError(t, err)
			r := endedReclaim(t, eng, func(r *reclaim.Reclaim) bool { return r.Target.Namespace == ns }, 4*time.Minute)
			require.Equal(t, tc.want, r.State, r.Reason)
			require.Contains(t, r.Detail+r.Reason, fmt.Sprintf(tc.stopped, ns))
			if tc.want == reclaim.NotReleased {
				require.Contains(t, r.Reason, fmt.Sprintf(tc.why, ns))
				require.NotEmpty(t, gpuPods(t, admin, ns, false), "the GPU is still held")
				// The stop is taken back: no controller that comes later carries it out.
				require.Contains(t, r.Reason, "the stop was taken back")
				require.False(t, r.StopInPlace)
				w := (&objects{t: t, dyn: dyn, cs: admin, ns: ns}).get(r.Stopped.APIVersion, strings.ToLower(r.Stopped.Kind)+"s", r.Stopped.Name)
				require.NotContains(t, w.GetAnnotations(), kube.StoppedAnnotation, "the stop is no longer written")
				require.NotContains(t, w.GetAnnotations(), kube.ReplicasAnnotation)
				t.Logf("%s (%s): not released after %s: %s", tc.name, tc.controller, r.Closed.Sub(r.ActedAt).Round(time.Second), r.Reason)
				return
			}
			require.Empty(t, gpuPods(t, admin, ns, false), "done: no GPU pod of the workload is left on the node")
			require.Never(t, func() bool { return len(gpuPods(t, admin, ns, false)) > 0 }, time.Minute, time.Second, "the controller starts no GPU pod again")
			released := r.ReleasedAt.Sub(r.ActedAt)

			_, err = eng.Restore(ctx, r.ID, "test")
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				r, _ = eng.Get(r.ID)
				return r.Restore != nil && !r.Restore.Pending()
			}, 3*time.Minute, 500*time.Millisecond, "the restore ends")
			require.Empty(t, r.Restore.Failed)
			require.NotEmpty(t, gpuPods(t, admin, ns, true), "restored: a GPU pod runs again")
			t.Logf("%s (%s): done, released %s after the action; restored %s after asking", tc.name, tc.controller,
				released.Round(100*time.Millisecond), r.Restore.RestoredAt.Sub(r.Restore.AskedAt).Round(100*time.Millisecond))
		})
	}
}
