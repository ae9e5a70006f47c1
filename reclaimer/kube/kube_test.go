package kube_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var ctx = context.Background()

func ptr[T any](v T) *T { return &v }

// bindReclaimerRole applies the ClusterRole we ship and binds it to the
// reclaimer's token.
func bindReclaimerRole(t *testing.T, cl *kubetest.Cluster) {
	b, err := deploy.ReclaimerClusterRole("../..")
	require.NoError(t, err)
	cl.BindReclaimerRole(t, b)
}

func namespace(t *testing.T, admin kubernetes.Interface, name string, ann map[string]string) string {
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

func pod(t *testing.T, admin kubernetes.Interface, ns, name string, labels, ann map[string]string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	p, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)
	return p
}

// newClient is the reclaimer's client with the reclaimer's token and the
// built-in workload kinds.
func newClient(t *testing.T, cl *kubetest.Cluster, clock func() time.Time, o kube.Options) *kube.Client {
	t.Helper()
	if o.Workloads == nil {
		o.Workloads = config.BuiltinWorkloads()
	}
	o.EvictionDeadline, o.Events, o.Clock, o.Logger = 10*time.Minute, true, clock, slog.New(slog.DiscardHandler)
	kc, err := kube.New(cl.RESTConfig(kubetest.ReclaimerToken), o)
	require.NoError(t, err)
	return kc
}

func target(ns, pod string) *reclaim.Reclaim {
	return &reclaim.Reclaim{ID: "r-" + pod, ActAt: time.Now(), Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Node: "n1", Namespace: ns, Pod: pod}}
}

func TestKubernetes(t *testing.T) {
	cl := kubetest.Start(t, false)
	admin := cl.Client(t, kubetest.AdminToken)
	bindReclaimerRole(t, cl)
	cs := cl.Client(t, kubetest.ReclaimerToken)
	now := time.Now()
	clock := func() time.Time { return now }
	kc := newClient(t, cl, clock, kube.Options{})

	t.Run("the role allows what the reclaimer calls and nothing else", func(t *testing.T) {
		ns := namespace(t, admin, "rbac", nil)
		pod(t, admin, ns, "p", nil, nil, nil)
		_, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for what, call := range map[string]func() error{
			"list secrets":       func() error { _, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
			"delete a namespace": func() error { return cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) },
			"delete a pod":       func() error { return cs.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{}) },
			"create a pod": func() error {
				_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
				return err
			},
			"delete a deployment": func() error { return cs.AppsV1().Deployments(ns).Delete(ctx, "d", metav1.DeleteOptions{}) },
			"update a deployment": func() error {
				_, err := cs.AppsV1().Deployments(ns).Update(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: ns}}, metav1.UpdateOptions{})
				return err
			},
			"read nodes": func() error { _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); return err },
		} {
			require.True(t, apierrors.IsForbidden(call()), "the reclaimer may not %s", what)
		}
	})

	t.Run("evict a pod", func(t *testing.T) {
		ns := namespace(t, admin, "evict", nil)
		pod(t, admin, ns, "nb-0", nil, nil, nil)
		res, err := kc.Evict(ctx, target(ns, "nb-0"))
		require.NoError(t, err)
		require.Equal(t, "pod evict/nb-0 evicted", res.Detail)
		require.Eventually(t, func() bool {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, "nb-0", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 10*time.Second, 50*time.Millisecond)
		_, err = kc.Evict(ctx, target(ns, "nb-0"))
		require.ErrorIs(t, err, reclaim.ErrGone, "evicting again does nothing twice")
	})

	t.Run("a PodDisruptionBudget blocks the eviction, then the deadline passes", func(t *testing.T) {
		ns := namespace(t, admin, "pdb", nil)
		p := pod(t, admin, ns, "serve-0", map[string]string{"app": "serve"}, nil, nil)
		// A budget protects running pods only: a pending one is evicted regardless.
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		_, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		require.NoError(t, err)
		_, err = admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: "serve"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "serve"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		r := target(ns, "serve-0")
		start := time.Now()
		_, err = kc.Evict(ctx, r)
		require.Less(t, time.Since(start), 5*time.Second, "no hidden retries inside client-go")
		var retry *reclaim.RetryError
		require.True(t, errors.As(err, &retry), "%v", err)
		require.Contains(t, err.Error(), "refused by a PodDisruptionBudget")
		_, err = admin.CoreV1().Pods(ns).Get(ctx, "serve-0", metav1.GetOptions{})
		require.NoError(t, err, "the pod stays")

		late := newClient(t, cl, func() time.Time { return now.Add(11 * time.Minute) }, kube.Options{})
		_, err = late.Evict(ctx, r)
		require.False(t, errors.As(err, &retry), "past the deadline the refusal is final")
		require.Contains(t, err.Error(), "refused by a PodDisruptionBudget for 10m0s")

		require.NoError(t, admin.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, "serve", metav1.DeleteOptions{}))
		_, err = kc.Evict(ctx, r)
		require.NoError(t, err, "once the budget allows it")
	})

	t.Run("scale down a Deployment and restore it", func(t *testing.T) {
		ns := namespace(t, admin, "deploy", nil)
		d, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "chat-api"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "chat"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "chat"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		// Without a controller manager, make the ReplicaSet and pod it would.
		rs, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "chat-api-5d8f7c9b4", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr(true)}}},
			Spec:       appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pod(t, admin, ns, "chat-api-5d8f7c9b4-x2x7p", map[string]string{"app": "chat"}, nil,
			&metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr(true)})

		r := target(ns, "chat-api-5d8f7c9b4-x2x7p")
		topOwner, err := kc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.TopOwner{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "chat-api", Replicas: 3, Stop: reclaim.StopScale, Stopped: "scaled down"}, topOwner)
		res, err := kc.ScaleDown(ctx, r, 0)
		require.NoError(t, err)
		require.Equal(t, &reclaim.Stopped{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "chat-api", Stop: reclaim.StopScale, PreviousReplicas: 3, ScaledTo: 0, StopVerb: "scaled down", RestoreVerb: "scaled back"}, res.Stopped)
		got, err := admin.AppsV1().Deployments(ns).Get(ctx, "chat-api", metav1.GetOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 0, *got.Spec.Replicas)
		require.Equal(t, "3", got.Annotations[kube.ReplicasAnnotation])

		// After a crash the action runs again: nothing changes, the count is kept.
		res, err = kc.ScaleDown(ctx, r, 0)
		require.NoError(t, err)
		require.EqualValues(t, 3, res.Stopped.PreviousReplicas)

		r.Stopped = res.Stopped
		require.NoError(t, kc.Restore(ctx, r))
		got, err = admin.AppsV1().Deployments(ns).Get(ctx, "chat-api", metav1.GetOptions{})
		require.NoError(t, err)
		require.EqualValues(t, 3, *got.Spec.Replicas)
		require.NotContains(t, got.Annotations, kube.ReplicasAnnotation)

		kc.Event(ctx, r, "GPUReclaimed", "GPU reclaimed (scale_down)")
		evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		var on []string
		for _, e := range evs.Items {
			require.Equal(t, "GPUReclaimed", e.Reason)
			require.Equal(t, "gpureclaim-reclaimer", e.Source.Component)
			on = append(on, e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name)
		}
		require.ElementsMatch(t, []string{"Pod/chat-api-5d8f7c9b4-x2x7p", "Deployment/chat-api"}, on)
	})

	t.Run("scale down a StatefulSet and restore it", func(t *testing.T) {
		ns := namespace(t, admin, "sts", nil)
		s, err := admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "vllm"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vllm"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "vllm"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pod(t, admin, ns, "vllm-1", map[string]string{"app": "vllm"}, nil,
			&metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: s.Name, UID: s.UID, Controller: ptr(true)})
		r := target(ns, "vllm-1")
		topOwner, err := kc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.TopOwner{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: ns, Name: "vllm", Replicas: 2, Stop: reclaim.StopScale, Stopped: "scaled down"}, topOwner)
		res, err := kc.ScaleDown(ctx, r, 1)
		require.NoError(t, err)
		require.Equal(t, "StatefulSet vllm scaled from 2 to 1 replicas", strings.Replace(res.Detail, "sts/", "", 1))
		got, _ := admin.AppsV1().StatefulSets(ns).Get(ctx, "vllm", metav1.GetOptions{})
		require.EqualValues(t, 1, *got.Spec.Replicas)
		r.Stopped = res.Stopped
		require.NoError(t, kc.Restore(ctx, r))
		got, _ = admin.AppsV1().StatefulSets(ns).Get(ctx, "vllm", metav1.GetOptions{})
		require.EqualValues(t, 2, *got.Spec.Replicas)
	})

	t.Run("released only once every pod that held the GPU is gone, whatever became of its owner", func(t *testing.T) {
		ns := namespace(t, admin, "held-by", nil)
		job, err := admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		owned := &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr(true)}
		gpuPod := func(name string, owners []metav1.OwnerReference, finalizers ...string) {
			_, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners, Finalizers: finalizers},
				Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
		gpuPod("train-0", []metav1.OwnerReference{*owned})
		gpuPod("train-1", []metav1.OwnerReference{*owned}, "example.com/terminating") // stands for a kubelet's termination grace
		r := target(ns, "train-0")
		r.TopOwner = &reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "train", Stop: reclaim.StopPatch}
		held, err := kc.Holders(ctx, r)
		require.NoError(t, err)
		p0, _ := admin.CoreV1().Pods(ns).Get(ctx, "train-0", metav1.GetOptions{})
		p1, _ := admin.CoreV1().Pods(ns).Get(ctx, "train-1", metav1.GetOptions{})
		require.Equal(t, []string{ns + "/train-0/" + string(p0.UID), ns + "/train-1/" + string(p1.UID)}, held)
		r.HeldBy = held

		// The owner is deleted (KubeRay deletes a RayJob's RayCluster), its
		// pods end: one at once, one still terminating.
		background := metav1.DeletePropagationBackground // gone at once; no collector runs here to take its pods
		require.NoError(t, admin.BatchV1().Jobs(ns).Delete(ctx, "train", metav1.DeleteOptions{PropagationPolicy: &background}))
		require.Eventually(t, func() bool {
			_, err := admin.BatchV1().Jobs(ns).Get(ctx, "train", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, 50*time.Millisecond)
		require.NoError(t, admin.CoreV1().Pods(ns).Delete(ctx, "train-0", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}))
		require.NoError(t, admin.CoreV1().Pods(ns).Delete(ctx, "train-1", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}))
		rel, err := kc.Released(ctx, r)
		require.NoError(t, err)
		require.False(t, rel.Done, "train-1 still holds the GPU, though its Job is gone")
		require.Contains(t, rel.Why, "pod "+ns+"/train-1")
		require.Contains(t, rel.Why, "terminating")

		// Gone: released. A pod of the same name made anew is another pod.
		_, err = admin.CoreV1().Pods(ns).Patch(ctx, "train-1", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err := admin.CoreV1().Pods(ns).Get(ctx, "train-1", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 30*time.Second, 50*time.Millisecond)
		gpuPod("train-1", nil)
		rel, err = kc.Released(ctx, r)
		require.NoError(t, err)
		require.True(t, rel.Done, "%s", rel.Why)
	})

	t.Run("restored only once a pod of the workload that holds a GPU runs", func(t *testing.T) {
		ns := namespace(t, admin, "restored", nil)
		job, err := admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "tune"},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		owned := []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr(true)}}
		running := func(name string, limits corev1.ResourceList) {
			p, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owned},
				Spec: corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "c", Image: "i",
					Resources: corev1.ResourceRequirements{Limits: limits}}}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			p.Status.Phase = corev1.PodRunning
			_, err = admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		r := target(ns, "tune-0")
		r.Stopped = &reclaim.Stopped{APIVersion: "batch/v1", Kind: "Job", Namespace: ns, Name: "tune", Stop: reclaim.StopPatch}

		// A submitter without a GPU runs first (a RayJob's): not yet.
		running("tune-submitter", nil)
		run, err := kc.Running(ctx, r)
		require.NoError(t, err)
		require.False(t, run.Done, "a pod without a GPU is not the workload's GPU work")
		require.Contains(t, run.Why, "no pod of Job "+ns+"/tune that holds a GPU runs")

		// Its GPU pod runs, on another node than the one it was stopped on.
		running("tune-1", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
		run, err = kc.Running(ctx, r)
		require.NoError(t, err)
		require.True(t, run.Done, "%s", run.Why)
	})

	t.Run("a StatefulSet that deletes its volumes when scaled is not scaled", func(t *testing.T) {
		ns := namespace(t, admin, "sts-delete", nil)
		s, err := admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db"},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
				PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
					WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		pod(t, admin, ns, "db-0", map[string]string{"app": "db"}, nil,
			&metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: s.Name, UID: s.UID, Controller: ptr(true)})
		topOwner, err := kc.TopOwner(ctx, target(ns, "db-0").Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.StopNone, topOwner.Stop)
		require.Contains(t, topOwner.Why, "persistentVolumeClaimRetentionPolicy.whenScaled: Delete")
	})

	t.Run("a pod with no controller cannot be scaled", func(t *testing.T) {
		ns := namespace(t, admin, "bare", nil)
		pod(t, admin, ns, "lonely", nil, nil, nil)
		_, err := kc.ScaleDown(ctx, target(ns, "lonely"), 0)
		require.ErrorContains(t, err, "has no controller to scale down")
		topOwner, err := kc.TopOwner(ctx, target(ns, "lonely").Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.TopOwner{}, topOwner)
		_, err = kc.TopOwner(ctx, target(ns, "gone").Target)
		require.ErrorIs(t, err, reclaim.ErrGone)
	})

	t.Run("kept pods and namespaces, and start times", func(t *testing.T) {
		ns := namespace(t, admin, "keep", nil)
		kept := namespace(t, admin, "kept-ns", map[string]string{"gpureclaim.io/keep": "true"})
		pod(t, admin, ns, "annotated", nil, map[string]string{"gpureclaim.io/keep": "true"}, nil)
		pod(t, admin, ns, "labelled", map[string]string{"gpureclaim.io/keep": "true"}, nil, nil)
		pod(t, admin, ns, "plain", nil, nil, nil)
		pod(t, admin, kept, "any", nil, nil, nil)
		for p, want := range map[string]string{"annotated": "the pod is marked gpureclaim.io/keep", "labelled": "the pod is marked gpureclaim.io/keep", "plain": ""} {
			ok, why, err := kc.Kept(ctx, reclaim.Target{Namespace: ns, Pod: p})
			require.NoError(t, err)
			require.Equal(t, want != "", ok, p)
			require.Equal(t, want, why)
		}
		ok, why, err := kc.Kept(ctx, reclaim.Target{Namespace: kept, Pod: "any"})
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "namespace kept-ns is marked gpureclaim.io/keep", why)
		started, err := kc.Started(ctx, reclaim.Target{Namespace: ns, Pod: "plain"})
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), started, time.Minute)
		_, err = kc.Started(ctx, reclaim.Target{Namespace: ns, Pod: "nope"})
		require.ErrorIs(t, err, reclaim.ErrGone)
	})
}
