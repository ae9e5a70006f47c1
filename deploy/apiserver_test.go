package deploy_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	rconfig "github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var ctx = context.Background()

func kubectl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tooltest.Bin(t, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// TestManifestsOnAPIServer validates every object the chart renders on a
// real kube-apiserver (server-side dry run, prometheus-operator's CRDs
// installed first), applies the plain manifests, and checks that the
// reclaimer's ServiceAccount token can do what the reclaimer does and is
// refused what it must not do.
func TestManifestsOnAPIServer(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	crds := tooltest.Bin(t, "crds") // prometheus-operator's CRDs, from make tools
	c := kubetest.Start(t, false)
	admin := c.Client(t, kubetest.AdminToken)
	kc := c.Kubeconfig

	c.InstallCRDs(t, crds)
	established := kubectl(t, kc, "get", "crd", "-o", `jsonpath={.items[*].status.conditions[?(@.type=="Established")].status}`)
	require.Equal(t, 3, strings.Count(established, "True"), "prometheus-operator's three CRDs are established")

	manifests := filepath.Join(tooltest.Root(t), "deploy", "manifests")
	core, operator := filepath.Join(manifests, deploy.CoreFile), filepath.Join(manifests, deploy.OperatorFile)
	// The namespace for real first: a dry run creates nothing to put objects in.
	ns, err := deploy.Find(core, "Namespace", deploy.Namespace)
	require.NoError(t, err)
	nsFile := filepath.Join(t.TempDir(), "ns.yaml")
	require.NoError(t, os.WriteFile(nsFile, ns, 0o644))
	kubectl(t, kc, "apply", "-f", nsFile)
	kubectl(t, kc, "create", "namespace", "monitoring") // the all-on values put dashboards there

	t.Run("server-side dry run", func(t *testing.T) {
		for set := range valueSets {
			file := filepath.Join(t.TempDir(), set+".yaml")
			out := render(t, helm, set)
			require.NoError(t, os.WriteFile(file, out, 0o644))
			res := kubectl(t, kc, "apply", "--dry-run=server", "-f", file)
			require.Equal(t, len(deploy.Docs(out)), strings.Count(res, "(server dry run)"), "%s:\n%s", set, res)
		}
	})

	kubectl(t, kc, "apply", "-f", core)
	kubectl(t, kc, "apply", "-f", operator)
	got := kubectl(t, kc, "-n", deploy.Namespace, "get", "daemonset,deployment,service,servicemonitor,prometheusrule,configmap", "-o", "name")
	for _, want := range []string{"daemonset.apps/gpureclaim-exporter", "deployment.apps/gpureclaim-reclaimer",
		"servicemonitor.monitoring.coreos.com/gpureclaim-exporter", "prometheusrule.monitoring.coreos.com/gpureclaim",
		"configmap/gpureclaim-dashboard-fleet"} {
		require.Contains(t, got, want)
	}

	tok, err := admin.CoreV1().ServiceAccounts(deploy.Namespace).CreateToken(ctx, "gpureclaim-reclaimer",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	sa := c.Client(t, tok.Status.Token)
	rc, err := kube.New(c.RESTConfig(tok.Status.Token), kube.Options{Workloads: rconfig.BuiltinWorkloads(), Kueue: true,
		EvictionDeadline: time.Minute, Events: true, Clock: time.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)

	team := "team-a"
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: team}}, metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("evicts a pod", func(t *testing.T) {
		createPod(t, admin, team, "notebook", nil)
		r := &reclaim.Reclaim{ID: "r1", ActAt: time.Now(), Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Namespace: team, Pod: "notebook"}}
		kept, _, err := rc.Kept(ctx, r.Target)
		require.NoError(t, err)
		require.False(t, kept)
		_, err = rc.Evict(ctx, r)
		require.NoError(t, err)
		_, err = admin.CoreV1().Pods(team).Get(ctx, "notebook", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the evicted pod is gone: %v", err)
		rc.Event(ctx, r, "GPUReclaimed", "evicted")
		ev, err := admin.CoreV1().Events(team).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, ev.Items, "the reclaimer may write Events")
	})

	t.Run("scales a Deployment down and back", func(t *testing.T) {
		d, err := admin.AppsV1().Deployments(team).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "inference"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(3)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "inference"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "inference"}}, Spec: podSpec()}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		// No controller manager runs here: the ReplicaSet and its pod are made by hand.
		rs, err := admin.AppsV1().ReplicaSets(team).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "inference-1", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr(true)}}},
			Spec:       appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		createPod(t, admin, team, "inference-1-abcde", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr(true)})

		r := &reclaim.Reclaim{ID: "r2", ActAt: time.Now(), Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-2", Namespace: team, Pod: "inference-1-abcde"}}
		topOwner, err := rc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		require.Equal(t, reclaim.TopOwner{APIVersion: "apps/v1", Kind: "Deployment", Namespace: team, Name: "inference", Replicas: 3, Stop: reclaim.StopScale, Stopped: "scaled down"}, topOwner)
		res, err := rc.ScaleDown(ctx, r, 0)
		require.NoError(t, err)
		d, err = admin.AppsV1().Deployments(team).Get(ctx, "inference", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, int32(0), *d.Spec.Replicas)
		require.Equal(t, "3", d.Annotations[kube.ReplicasAnnotation])

		r.Stopped = res.Stopped
		require.NoError(t, rc.Restore(ctx, r))
		d, err = admin.AppsV1().Deployments(team).Get(ctx, "inference", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, int32(3), *d.Spec.Replicas)
	})

	t.Run("suspends a Job and resumes it", func(t *testing.T) {
		job, err := admin.BatchV1().Jobs(team).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "train"},
			Spec:       batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: podSpec().Containers}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		createPod(t, admin, team, "train-abcde", &metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr(true)})
		r := &reclaim.Reclaim{ID: "r3", ActAt: time.Now(), Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-3", Namespace: team, Pod: "train-abcde"}}
		topOwner, err := rc.TopOwner(ctx, r.Target)
		require.NoError(t, err)
		r.TopOwner = &topOwner
		res, err := rc.Stop(ctx, r)
		require.NoError(t, err)
		require.Equal(t, "Job team-a/train suspended", res.Detail)
		r.Stopped = res.Stopped
		require.NoError(t, rc.Restore(ctx, r))
		job, err = admin.BatchV1().Jobs(team).Get(ctx, "train", metav1.GetOptions{})
		require.NoError(t, err)
		require.False(t, *job.Spec.Suspend)
	})

	t.Run("takes leases in its own namespace only", func(t *testing.T) {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpureclaim-reclaimer"}}
		_, err := sa.CoordinationV1().Leases(deploy.Namespace).Create(ctx, lease, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = sa.CoordinationV1().Leases(team).Create(ctx, lease, metav1.CreateOptions{})
		require.True(t, apierrors.IsForbidden(err), "%v", err)
	})

	t.Run("is refused the rest", func(t *testing.T) {
		createPod(t, admin, team, "training", nil)
		for what, call := range map[string]func() error{
			"list secrets": func() error { _, err := sa.CoreV1().Secrets(team).List(ctx, metav1.ListOptions{}); return err },
			"list its secrets": func() error {
				_, err := sa.CoreV1().Secrets(deploy.Namespace).List(ctx, metav1.ListOptions{})
				return err
			},
			"get a secret":       func() error { _, err := sa.CoreV1().Secrets(team).Get(ctx, "any", metav1.GetOptions{}); return err },
			"delete a namespace": func() error { return sa.CoreV1().Namespaces().Delete(ctx, team, metav1.DeleteOptions{}) },
			"delete a pod":       func() error { return sa.CoreV1().Pods(team).Delete(ctx, "training", metav1.DeleteOptions{}) },
			"update a pod": func() error {
				p, err := admin.CoreV1().Pods(team).Get(ctx, "training", metav1.GetOptions{})
				require.NoError(t, err)
				p.Annotations = map[string]string{"x": "y"}
				_, err = sa.CoreV1().Pods(team).Update(ctx, p, metav1.UpdateOptions{})
				return err
			},
			"delete a Deployment": func() error { return sa.AppsV1().Deployments(team).Delete(ctx, "inference", metav1.DeleteOptions{}) },
			"list ConfigMaps":     func() error { _, err := sa.CoreV1().ConfigMaps(team).List(ctx, metav1.ListOptions{}); return err },
			"create pods": func() error {
				_, err := sa.CoreV1().Pods(team).Create(ctx, podObject("x", nil), metav1.CreateOptions{})
				return err
			},
			"delete a Job": func() error { return sa.BatchV1().Jobs(team).Delete(ctx, "train", metav1.DeleteOptions{}) },
			"list Jobs":    func() error { _, err := sa.BatchV1().Jobs(team).List(ctx, metav1.ListOptions{}); return err },
			"create a Job": func() error {
				_, err := sa.BatchV1().Jobs(team).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
				return err
			},
			"patch a CronJob": func() error {
				_, err := sa.BatchV1().CronJobs(team).Patch(ctx, "nightly", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{})
				return err
			},
			"patch a DaemonSet": func() error {
				_, err := sa.AppsV1().DaemonSets(team).Patch(ctx, "x", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
				return err
			},
			"escalate its role": func() error {
				return sa.RbacV1().ClusterRoles().Delete(ctx, "gpureclaim-reclaimer", metav1.DeleteOptions{})
			},
		} {
			err := call()
			require.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/gpu-workload:1"}}}
}

func podObject(name string, owner *metav1.OwnerReference) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "inference"}}, Spec: podSpec()}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

func createPod(t *testing.T, admin kubernetes.Interface, ns, name string, owner *metav1.OwnerReference) {
	t.Helper()
	_, err := admin.CoreV1().Pods(ns).Create(ctx, podObject(name, owner), metav1.CreateOptions{})
	require.NoError(t, err)
}
