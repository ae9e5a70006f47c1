package kube_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub/hubtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// objects creates owner chains as the workloads' own controllers would.
type objects struct {
	t   *testing.T
	dyn dynamic.Interface
	cs  kubernetes.Interface
	ns  string
}

var podTemplate = map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "main", "image": "registry.example.com/train:1"}}}}

// create makes an object owned (as controller) by owner, if any.
func (o *objects) create(apiVersion, kind, resource, name string, owner *unstructured.Unstructured, spec map[string]any, meta map[string]any) *unstructured.Unstructured {
	o.t.Helper()
	md := map[string]any{"name": name, "namespace": o.ns}
	for k, v := range meta {
		md[k] = v
	}
	if owner != nil {
		md["ownerReferences"] = []any{map[string]any{"apiVersion": owner.GetAPIVersion(), "kind": owner.GetKind(), "name": owner.GetName(), "uid": string(owner.GetUID()), "controller": true}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}}
	if spec != nil {
		u.Object["spec"] = spec
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	require.NoError(o.t, err)
	got, err := o.dyn.Resource(gv.WithResource(resource)).Namespace(o.ns).Create(ctx, u, metav1.CreateOptions{})
	require.NoError(o.t, err, "%s %s", kind, name)
	return got
}

func (o *objects) pod(name string, owner *unstructured.Unstructured, labels, ann map[string]any) *unstructured.Unstructured {
	meta := map[string]any{}
	if labels != nil {
		meta["labels"] = labels
	}
	if ann != nil {
		meta["annotations"] = ann
	}
	return o.create("v1", "Pod", "pods", name, owner, podTemplate["spec"].(map[string]any), meta)
}

func (o *objects) get(apiVersion, resource, name string) *unstructured.Unstructured {
	o.t.Helper()
	gv, _ := schema.ParseGroupVersion(apiVersion)
	u, err := o.dyn.Resource(gv.WithResource(resource)).Namespace(o.ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(o.t, err)
	return u
}

func suspendedJob(name string) map[string]any {
	return map[string]any{"suspend": true, "template": map[string]any{"spec": map[string]any{"restartPolicy": "Never", "containers": podTemplate["spec"].(map[string]any)["containers"]}}}
}

func nested(u *unstructured.Unstructured, path ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
	return v
}

// TestTopOwners walks each common GPU workload kind's chain of owners to
// its top on a real apiserver with the upstream CRDs (or, where the module
// proxy serves none, the ones in testdata), stops it the way its
// controller expects and restores it, with the reclaimer's own role.
func TestTopOwners(t *testing.T) {
	cl := kubetest.Start(t, false)
	cl.InstallCRDs(t, tooltest.Bin(t, "workload-crds"), "testdata/crds")
	admin := cl.Client(t, kubetest.AdminToken)
	bindReclaimerRole(t, cl)
	dyn, err := dynamic.NewForConfig(cl.RESTConfig(kubetest.AdminToken))
	require.NoError(t, err)
	hub := hubtest.New("culler-token", "alice")
	defer hub.Close()
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	kc := newClient(t, cl, func() time.Time { return now }, kube.Options{Kueue: true, Hub: hub.Client(t, hub.Token)})
	ns := namespace(t, admin, "ml", nil)
	o := &objects{t: t, dyn: dyn, cs: admin, ns: ns}

	type check struct {
		apiVersion, resource, name string
		path                       []string
		stopped, restored          any
	}
	cases := []struct {
		name   string
		setup  func() string // returns the pod
		want   reclaim.TopOwner
		detail string
		check  check
	}{{
		name: "batch Job: suspended",
		setup: func() string {
			job := o.create("batch/v1", "Job", "jobs", "train-7", nil, suspendedJob("train-7"), nil)
			require.NoError(t, unstructured.SetNestedField(job.Object, false, "spec", "suspend"))
			_, err := dyn.Resource(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}).Namespace(ns).Update(ctx, job, metav1.UpdateOptions{})
			require.NoError(t, err)
			return o.pod("train-7-x8k2p", job, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "train-7", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "Job ml/train-7 suspended",
		check:  check{"batch/v1", "jobs", "train-7", []string{"spec", "suspend"}, true, false},
	}, {
		name: "a CronJob's Job: the Job is suspended, the schedule stays",
		setup: func() string {
			cron := o.create("batch/v1", "CronJob", "cronjobs", "nightly", nil, map[string]any{"schedule": "0 2 * * *", "jobTemplate": map[string]any{"spec": suspendedJob("")}}, nil)
			job := o.create("batch/v1", "Job", "jobs", "nightly-29170", cron, suspendedJob(""), nil)
			return o.pod("nightly-29170-abcde", job, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "nightly-29170", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "Job ml/nightly-29170 suspended",
		check:  check{"batch/v1", "jobs", "nightly-29170", []string{"spec", "suspend"}, true, false},
	}, {
		name: "Kueue admits the Job: its Workload is deactivated",
		setup: func() string {
			job := o.create("batch/v1", "Job", "jobs", "queued", nil, suspendedJob(""), map[string]any{"labels": map[string]any{config.KueueQueueLabel: "team-a"}})
			o.create("kueue.x-k8s.io/v1beta1", "Workload", "workloads", "job-queued-3c1a2", job, map[string]any{
				"queueName": "team-a", "podSets": []any{map[string]any{"name": "main", "count": int64(1), "template": podTemplate}},
			}, nil)
			return o.pod("queued-q7w2e", job, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "queued", Stop: reclaim.StopKueue, Stopped: "stopped through its Kueue Workload"},
		detail: "Job ml/queued stopped: Kueue Workload job-queued-3c1a2 deactivated",
		check:  check{"kueue.x-k8s.io/v1beta1", "workloads", "job-queued-3c1a2", []string{"spec", "active"}, false, true},
	}, {
		name: "JobSet: suspended",
		setup: func() string {
			js := o.create("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", "pretrain", nil, map[string]any{"suspend": false}, nil)
			job := o.create("batch/v1", "Job", "jobs", "pretrain-workers-0", js, suspendedJob(""), nil)
			return o.pod("pretrain-workers-0-0-abcde", job, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Namespace: ns, Name: "pretrain", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "JobSet ml/pretrain suspended",
		check:  check{"jobset.x-k8s.io/v1alpha2", "jobsets", "pretrain", []string{"spec", "suspend"}, true, false},
	}, {
		name: "Kubeflow TrainJob above a JobSet: suspended",
		setup: func() string {
			tj := o.create("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs", "finetune", nil, map[string]any{"runtimeRef": map[string]any{"name": "torch-distributed"}}, nil)
			js := o.create("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets", "finetune", tj, map[string]any{}, nil)
			job := o.create("batch/v1", "Job", "jobs", "finetune-node-0", js, suspendedJob(""), nil)
			return o.pod("finetune-node-0-0-abcde", job, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Namespace: ns, Name: "finetune", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "TrainJob ml/finetune suspended",
		check:  check{"trainer.kubeflow.org/v1alpha1", "trainjobs", "finetune", []string{"spec", "suspend"}, true, false},
	}, {
		name: "Kubeflow PyTorchJob: suspended through its run policy",
		setup: func() string {
			pj := o.create("kubeflow.org/v1", "PyTorchJob", "pytorchjobs", "bert", nil, map[string]any{
				"pytorchReplicaSpecs": map[string]any{"Master": map[string]any{"replicas": int64(1), "template": podTemplate}},
			}, nil)
			return o.pod("bert-master-0", pj, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "kubeflow.org/v1", Kind: "PyTorchJob", Namespace: ns, Name: "bert", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "PyTorchJob ml/bert suspended",
		check:  check{"kubeflow.org/v1", "pytorchjobs", "bert", []string{"spec", "runPolicy", "suspend"}, true, false},
	}, {
		name: "KubeRay RayJob whose shutdownAfterJobFinishes is false (the default): its RayCluster suspended",
		setup: func() string {
			rj := o.create("ray.io/v1", "RayJob", "rayjobs", "sweep", nil, map[string]any{"entrypoint": "python sweep.py"}, nil)
			rc := o.create("ray.io/v1", "RayCluster", "rayclusters", "sweep-raycluster-x2x", rj, map[string]any{"headGroupSpec": map[string]any{"template": podTemplate}}, nil)
			return o.pod("sweep-raycluster-x2x-head-abcde", rc, nil, nil).GetName()
		},
		want: reclaim.TopOwner{APIVersion: "ray.io/v1", Kind: "RayCluster", Namespace: ns, Name: "sweep-raycluster-x2x", Stop: reclaim.StopPatch, Stopped: "suspended",
			Why:   "KubeRay refuses to suspend RayJob ml/sweep: its shutdownAfterJobFinishes is false: its RayCluster is suspended instead, which KubeRay honours in any state",
			Above: &reclaim.TopOwner{APIVersion: "ray.io/v1", Kind: "RayJob", Namespace: ns, Name: "sweep"}},
		detail: "RayCluster ml/sweep-raycluster-x2x suspended (KubeRay refuses to suspend RayJob ml/sweep: its shutdownAfterJobFinishes is false: its RayCluster is suspended instead, which KubeRay honours in any state)",
		check:  check{"ray.io/v1", "rayclusters", "sweep-raycluster-x2x", []string{"spec", "suspend"}, true, false},
	}, {
		name: "KubeRay RayJob that KubeRay suspends (shutdownAfterJobFinishes, Running): suspended",
		setup: func() string {
			rj := o.create("ray.io/v1", "RayJob", "rayjobs", "train", nil, map[string]any{"entrypoint": "python train.py", "shutdownAfterJobFinishes": true}, nil)
			require.NoError(t, unstructured.SetNestedField(rj.Object, "Running", "status", "jobDeploymentStatus"))
			rj, err := dyn.Resource(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}).Namespace(ns).UpdateStatus(ctx, rj, metav1.UpdateOptions{})
			require.NoError(t, err)
			rc := o.create("ray.io/v1", "RayCluster", "rayclusters", "train-raycluster-q7z", rj, map[string]any{"headGroupSpec": map[string]any{"template": podTemplate}}, nil)
			return o.pod("train-raycluster-q7z-head-abcde", rc, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "ray.io/v1", Kind: "RayJob", Namespace: ns, Name: "train", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "RayJob ml/train suspended",
		check:  check{"ray.io/v1", "rayjobs", "train", []string{"spec", "suspend"}, true, false},
	}, {
		name: "KubeRay RayCluster alone: suspended",
		setup: func() string {
			rc := o.create("ray.io/v1", "RayCluster", "rayclusters", "interactive", nil, map[string]any{"headGroupSpec": map[string]any{"template": podTemplate}}, nil)
			return o.pod("interactive-head-abcde", rc, nil, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "ray.io/v1", Kind: "RayCluster", Namespace: ns, Name: "interactive", Stop: reclaim.StopPatch, Stopped: "suspended"},
		detail: "RayCluster ml/interactive suspended",
		check:  check{"ray.io/v1", "rayclusters", "interactive", []string{"spec", "suspend"}, true, false},
	}, {
		name: "Kubeflow Notebook above its StatefulSet: the stop annotation",
		setup: func() string {
			nb := o.create("kubeflow.org/v1", "Notebook", "notebooks", "alice", nil, map[string]any{"template": podTemplate}, nil)
			sts := o.create("apps/v1", "StatefulSet", "statefulsets", "alice", nb, map[string]any{"replicas": int64(1), "serviceName": "alice",
				"selector": map[string]any{"matchLabels": map[string]any{"notebook-name": "alice"}},
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"notebook-name": "alice"}}, "spec": podTemplate["spec"]}}, nil)
			return o.pod("alice-0", sts, map[string]any{"notebook-name": "alice"}, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "kubeflow.org/v1", Kind: "Notebook", Namespace: ns, Name: "alice", Stop: reclaim.StopPatch, Stopped: "stopped"},
		detail: "Notebook ml/alice stopped",
		check:  check{"kubeflow.org/v1", "notebooks", "alice", []string{"metadata", "annotations", "kubeflow-resource-stopped"}, "2026-12-01T09:00:00Z", nil},
	}, {
		name: "KServe InferenceService above its Deployment: the stop annotation",
		setup: func() string {
			isvc := o.create("serving.kserve.io/v1beta1", "InferenceService", "inferenceservices", "llama", nil, map[string]any{"predictor": map[string]any{"model": map[string]any{"modelFormat": map[string]any{"name": "huggingface"}}}}, nil)
			dep := o.create("apps/v1", "Deployment", "deployments", "llama-predictor", isvc, map[string]any{"replicas": int64(1),
				"selector": map[string]any{"matchLabels": map[string]any{"app": "llama"}},
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "llama"}}, "spec": podTemplate["spec"]}}, nil)
			rs := o.create("apps/v1", "ReplicaSet", "replicasets", "llama-predictor-6f7c", dep, map[string]any{"replicas": int64(1),
				"selector": map[string]any{"matchLabels": map[string]any{"app": "llama"}},
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "llama"}}, "spec": podTemplate["spec"]}}, nil)
			return o.pod("llama-predictor-6f7c-abcde", rs, map[string]any{"app": "llama"}, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "serving.kserve.io/v1beta1", Kind: "InferenceService", Namespace: ns, Name: "llama", Stop: reclaim.StopPatch, Stopped: "stopped"},
		detail: "InferenceService ml/llama stopped",
		check:  check{"serving.kserve.io/v1beta1", "inferenceservices", "llama", []string{"metadata", "annotations", "serving.kserve.io/stop"}, "true", nil},
	}, {
		name: "LeaderWorkerSet above its StatefulSet: scaled through its scale subresource",
		setup: func() string {
			lws := o.create("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets", "vllm", nil, map[string]any{"replicas": int64(1)}, nil)
			sts := o.create("apps/v1", "StatefulSet", "statefulsets", "vllm", lws, map[string]any{"replicas": int64(1), "serviceName": "vllm",
				"selector": map[string]any{"matchLabels": map[string]any{"lws": "vllm"}},
				"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"lws": "vllm"}}, "spec": podTemplate["spec"]}}, nil)
			return o.pod("vllm-0", sts, map[string]any{"lws": "vllm"}, nil).GetName()
		},
		want:   reclaim.TopOwner{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Namespace: ns, Name: "vllm", Replicas: 1, Stop: reclaim.StopScale, Stopped: "scaled down"},
		detail: "LeaderWorkerSet ml/vllm scaled from 1 to 0 replicas",
		check:  check{"leaderworkerset.x-k8s.io/v1", "leaderworkersets", "vllm", []string{"spec", "replicas"}, int64(0), int64(1)},
	}, {
		name: "a JupyterHub single-user server: stopped through the hub",
		setup: func() string {
			return o.pod("jupyter-alice", nil, map[string]any{"component": "singleuser-server", "hub.jupyter.org/username": "alice"},
				map[string]any{"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": ""}).GetName()
		},
		want:   reclaim.TopOwner{Kind: "JupyterHub server", Name: "alice", Stop: reclaim.StopHub, Stopped: "stopped through the hub"},
		detail: "the JupyterHub server of alice stopped",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o.t = t
			pod := tc.setup()
			r := target(ns, pod)
			topOwner, err := kc.TopOwner(ctx, r.Target)
			require.NoError(t, err)
			require.Equal(t, tc.want, topOwner)
			r.TopOwner = &topOwner
			action := config.ActionStop
			var res reclaim.Result
			if topOwner.Stop == reclaim.StopScale {
				action = config.ActionScaleDown
				res, err = kc.ScaleDown(ctx, r, 0)
			} else {
				res, err = kc.Stop(ctx, r)
			}
			require.NoError(t, err)
			require.Equal(t, tc.detail, res.Detail)
			r.Action = action
			if tc.check.resource != "" {
				u := o.get(tc.check.apiVersion, tc.check.resource, tc.check.name)
				require.Equal(t, tc.check.stopped, nested(u, tc.check.path...), "stopped")
				if topOwner.Stop != reclaim.StopScale {
					require.Equal(t, r.ID, u.GetAnnotations()[kube.StoppedAnnotation], "the object says who stopped it")
				}
			} else {
				require.False(t, hub.Running("alice"))
			}
			// After a crash the action runs again: the same state, nothing more.
			again, err := kc.Stop(ctx, r)
			if topOwner.Stop == reclaim.StopHub {
				require.ErrorIs(t, err, reclaim.ErrGone, "the hub says the server is stopped already")
			} else {
				require.NoError(t, err)
				require.Equal(t, res.Stopped, again.Stopped)
			}

			r.Stopped = res.Stopped
			require.NoError(t, kc.Restore(ctx, r))
			if tc.check.resource != "" {
				u := o.get(tc.check.apiVersion, tc.check.resource, tc.check.name)
				require.Equal(t, tc.check.restored, nested(u, tc.check.path...), "restored")
				require.NotContains(t, u.GetAnnotations(), kube.StoppedAnnotation)
				require.NotContains(t, u.GetAnnotations(), kube.ReplicasAnnotation)
			} else {
				require.True(t, hub.Running("alice"))
			}
		})
	}
	o.t = t

	t.Run("an owner gpureclaim does not know is never acted beneath", func(t *testing.T) {
		o.t = t
		run := o.create("example.com/v1", "TrainingRun", "trainingruns", "run-1", nil, map[string]any{"paused": false}, nil)
		pod := o.pod("run-1-worker-0", run, nil, nil).GetName()
		r := target(ns, pod)
		topOwner, err := kc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.StopNone, topOwner.Stop)
		require.Equal(t, "the pod is owned by TrainingRun ml/run-1, which the reclaimer may not read; gpureclaim cannot stop it: declare its kind under `workloads:` (and grant get and patch on it)", topOwner.Why)
		r.TopOwner = &topOwner
		_, err = kc.Stop(ctx, r)
		require.Error(t, err)
		_, err = admin.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		require.NoError(t, err, "the pod stays")

		// Readable but not declared: still only reported, and said so.
		grant(t, cl, admin, "trainingruns", []string{"get", "patch"})
		topOwner, err = kc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.TopOwner{APIVersion: "example.com/v1", Kind: "TrainingRun", Namespace: ns, Name: "run-1", Stop: reclaim.StopNone,
			Why: "the pod is owned by TrainingRun ml/run-1, which gpureclaim cannot stop; declare it under `workloads:`"}, topOwner)

		// Declared in the config, it is paused and resumed.
		cfg, err := config.ParseWithoutSecrets([]byte(`webhook: {bearer_token_file: t}
web: {auth: {none: true}}
alertmanager: {url: "http://am:9093"}
workloads:
  - {name: trainingrun, group: example.com, version: v1, kind: TrainingRun, resource: trainingruns,
     stop: {spec: {paused: true}}, restore: {spec: {paused: false}}, stopped: paused, restored: resumed}
`))
		require.NoError(t, err)
		declared := newClient(t, cl, time.Now, kube.Options{Workloads: cfg.Workloads})
		topOwner, err = declared.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.TopOwner{APIVersion: "example.com/v1", Kind: "TrainingRun", Namespace: ns, Name: "run-1", Stop: reclaim.StopPatch, Stopped: "paused"}, topOwner)
		r.TopOwner = &topOwner
		res, err := declared.Stop(ctx, r)
		require.NoError(t, err)
		require.Equal(t, "TrainingRun ml/run-1 paused", res.Detail)
		require.Equal(t, true, nested(o.get("example.com/v1", "trainingruns", "run-1"), "spec", "paused"))
		r.Stopped = res.Stopped
		require.NoError(t, declared.Restore(ctx, r))
		require.Equal(t, false, nested(o.get("example.com/v1", "trainingruns", "run-1"), "spec", "paused"))
		require.Equal(t, "TrainingRun ml/run-1 resumed", res.Stopped.RestoredText())
	})

	t.Run("a kind turned off is only reported", func(t *testing.T) {
		o.t = t
		job := o.create("batch/v1", "Job", "jobs", "off", nil, suspendedJob(""), nil)
		pod := o.pod("off-abcde", job, nil, nil).GetName()
		ws := config.BuiltinWorkloads()
		for i := range ws {
			ws[i].Disabled = ws[i].Kind == "Job"
		}
		topOwner, err := newClient(t, cl, time.Now, kube.Options{Workloads: ws}).TopOwner(ctx, target(ns, pod).Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.StopNone, topOwner.Stop)
		require.Equal(t, "the pod is owned by Job ml/off; stopping Job is turned off in the config (workloads: job)", topOwner.Why)
	})

	t.Run("Kueue off: a job Kueue admits is only reported", func(t *testing.T) {
		o.t = t
		job := o.create("batch/v1", "Job", "jobs", "queued-2", nil, suspendedJob(""), map[string]any{"labels": map[string]any{config.KueueQueueLabel: "team-a"}})
		pod := o.pod("queued-2-abcde", job, nil, nil).GetName()
		topOwner, err := newClient(t, cl, time.Now, kube.Options{}).TopOwner(ctx, target(ns, pod).Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.StopNone, topOwner.Stop)
		require.Contains(t, topOwner.Why, "Kueue admits Job ml/queued-2")
	})

	t.Run("keep, owner and start come from the top owner too", func(t *testing.T) {
		o.t = t
		job := o.create("batch/v1", "Job", "jobs", "kept", nil, suspendedJob(""), map[string]any{
			"annotations": map[string]any{"gpureclaim.io/keep": "true", "gpureclaim.io/owner": "carol@example.com"}})
		pod := o.pod("kept-abcde", job, nil, nil).GetName()
		tg := target(ns, pod).Target
		kept, why, err := kc.Kept(ctx, tg)
		require.NoError(t, err)
		require.True(t, kept)
		require.Equal(t, "Job ml/kept is marked gpureclaim.io/keep", why)
		owner, err := kc.Owner(ctx, tg)
		require.NoError(t, err)
		require.Equal(t, "carol@example.com", owner)
		started, err := kc.Started(ctx, tg)
		require.NoError(t, err)
		require.Equal(t, job.GetCreationTimestamp().Time, started, "a Job without a start time: its creation")
	})
}

// grant gives the reclaimer more verbs on a resource of example.com, as an
// operator who declares a kind would.
func grant(t *testing.T, cl *kubetest.Cluster, admin kubernetes.Interface, resource string, verbs []string) {
	t.Helper()
	name := "gpureclaim-reclaimer-" + resource
	_, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"example.com"}, Resources: []string{resource}, Verbs: verbs}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: kubetest.ReclaimerUser}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// RBAC takes effect through the apiserver's informers: wait for it.
	dyn, err := dynamic.NewForConfig(cl.RESTConfig(kubetest.ReclaimerToken))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: resource}).Namespace("ml").Get(ctx, "run-1", metav1.GetOptions{})
		return err == nil || !apierrors.IsForbidden(err)
	}, 10*time.Second, 50*time.Millisecond)
}

// TestControllersDoNotUndo runs the real controller manager: a suspended
// Job's pod is deleted by the Job controller and none replaces it, a
// scaled-down Deployment stays down, and both come back on restore.
func TestControllersDoNotUndo(t *testing.T) {
	cl := kubetest.Start(t, true)
	admin := cl.Client(t, kubetest.AdminToken)
	bindReclaimerRole(t, cl)
	kc := newClient(t, cl, time.Now, kube.Options{})
	ns := namespace(t, admin, "batch", nil)
	pods := func(selector string) []corev1.Pod {
		l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		require.NoError(t, err)
		var live []corev1.Pod
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		return live
	}
	waitPod := func(selector string) string {
		var name string
		require.Eventually(t, func() bool {
			if ps := pods(selector); len(ps) == 1 {
				name = ps[0].Name
				return true
			}
			return false
		}, time.Minute, 100*time.Millisecond, "the controller starts one pod for %s", selector)
		return name
	}
	// The controllers have had a fair chance to act when a later object
	// they own has been handled: wait for that rather than for a time.
	noneFor := func(selector string) {
		require.Eventually(t, func() bool { return len(pods(selector)) == 0 }, time.Minute, 100*time.Millisecond, "%s: pods left", selector)
		require.Never(t, func() bool { return len(pods(selector)) > 0 }, 3*time.Second, 100*time.Millisecond, "%s: a pod came back", selector)
	}

	t.Run("an idle Job's pod: the Job is suspended, its pod deleted, none replaces it", func(t *testing.T) {
		_, err := admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "train-7"},
			Spec: batchv1.JobSpec{Parallelism: ptr(int32(1)), Completions: ptr(int32(1)), BackoffLimit: ptr(int32(6)),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/train:1"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		sel := "batch.kubernetes.io/job-name=train-7"
		pod := waitPod(sel)
		r := target(ns, pod)
		topOwner, err := kc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, "Job batch/train-7", topOwner.String())
		r.TopOwner, r.Action = &topOwner, config.ActionStop
		res, err := kc.Stop(ctx, r)
		require.NoError(t, err)
		noneFor(sel)
		job, err := admin.BatchV1().Jobs(ns).Get(ctx, "train-7", metav1.GetOptions{})
		require.NoError(t, err)
		require.True(t, *job.Spec.Suspend, "the Job controller keeps it suspended")
		require.Zero(t, job.Status.Failed, "a suspend is not a failure: the backoff limit is untouched")

		r.Stopped = res.Stopped
		require.NoError(t, kc.Restore(ctx, r))
		require.NotEqual(t, pod, waitPod(sel), "restored: the Job starts a pod again")
	})

	t.Run("an idle Deployment: scaled to zero and left there", func(t *testing.T) {
		d, err := admin.AppsV1().Deployments(ns).Create(ctx, deployment("chat-api", 1), metav1.CreateOptions{})
		require.NoError(t, err)
		sel := "app=" + d.Name
		pod := waitPod(sel)
		r := target(ns, pod)
		topOwner, err := kc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.StopScale, topOwner.Stop)
		r.TopOwner = &topOwner
		res, err := kc.ScaleDown(ctx, r, 0)
		require.NoError(t, err)
		noneFor(sel)
		got, err := admin.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 0, *got.Spec.Replicas, "nothing reverts the scale-down")
		r.Stopped = res.Stopped
		require.NoError(t, kc.Restore(ctx, r))
		waitPod(sel)
	})
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/serve:1"}}}}},
	}
}
