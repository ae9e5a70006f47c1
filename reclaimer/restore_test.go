package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/loop"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/promtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/route"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

// restoreInterval is how often restore_when is evaluated in the test.
const restoreInterval = time.Second

// TestRestoreWhen scales a one-replica Deployment down on a real
// apiserver, then makes its demand appear in a real Prometheus (a queue
// length its target starts to expose): the reclaimer scales it back within
// one restore interval of Prometheus answering with the sample, tells the
// owner, and records who restored it.
func TestRestoreWhen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kube-apiserver and Prometheus")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := kubetest.Start(t, false)
	role, err := deploy.ReclaimerClusterRole("..")
	require.NoError(t, err)
	cl.BindReclaimerRole(t, role)
	admin := cl.Client(t, kubetest.AdminToken)
	const ns, name = "serve", "chat-api"
	pod := createDeployment(t, admin, ns, name)

	// The Deployment's demand: a queue length, exposed only once work waits.
	var queued atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n := queued.Load(); n > 0 {
			fmt.Fprintf(w, "# TYPE app_queue_length gauge\napp_queue_length{namespace=%q,service=%q} %d\n", ns, name, n)
		}
	}))
	defer target.Close()
	prom := promtest.Scraping(t, nil, promtest.Job{Name: "app", URL: target.URL})

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("t\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reclaimer.yml"), []byte(fmt.Sprintf(`webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: "http://127.0.0.1:1"}
kubernetes: {enabled: true}
prometheus: {url: %q, interval: %s}
policies:
  - name: services
    matchers: ['alertname="GPUIdle"']
    action: auto
    grace: 0s
    min_runtime: 0s
    restore_when: 'app_queue_length{namespace="{{ .namespace }}", service="{{ .workload_name }}"} > 0'
`, prom.URL, restoreInterval)), 0o600))
	cfg, err := config.Load(filepath.Join(dir, "reclaimer.yml"))
	require.NoError(t, err)

	kc, err := kube.New(cl.RESTConfig(kubetest.ReclaimerToken), kube.Options{Workloads: cfg.Workloads, EvictionDeadline: time.Minute, Clock: time.Now, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	st, err := store.Open(filepath.Join(dir, "state.db"), time.Second)
	require.NoError(t, err)
	defer st.Close()
	owner := reclaimtest.NewNotifier("owner")
	routes := route.New(route.Backends{Config: cfg, Kubernetes: kc})
	eng, err := lifecycle.New(lifecycle.Options{
		Config: cfg, Store: st, Journal: st, Checker: &reclaimtest.Checker{}, Inspector: routes, Actor: routes, Planner: routes, Restorer: routes,
		Notifiers: []reclaim.Notifier{owner}, Clock: time.Now, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)

	_, err = eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", time.Now(), ns, pod)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		eng.Step(ctx)
		rs := eng.List()
		return len(rs) == 1 && rs[0].State == reclaim.Done
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, int32(0), replicas(t, admin, ns, name), "scaled down")

	q := &promquery.Client{URL: prom.URL, Timeout: 5 * time.Second}
	go loop.Every(ctx, restoreInterval, func() { eng.RestoreOnDemand(ctx, q) })

	// No demand: it stays down over several intervals.
	time.Sleep(3 * restoreInterval)
	require.Equal(t, int32(0), replicas(t, admin, ns, name), "no demand, no restore")

	queued.Store(4)
	query := fmt.Sprintf(`app_queue_length{namespace=%q, service=%q} > 0`, ns, name)
	var appeared time.Time
	require.Eventually(t, func() bool {
		ok, err := q.Demand(ctx, query)
		appeared = time.Now()
		return err == nil && ok
	}, 30*time.Second, 20*time.Millisecond, "Prometheus sees the demand")
	var restored time.Time
	require.Eventually(t, func() bool {
		restored = time.Now()
		return replicas(t, admin, ns, name) == 1
	}, 10*restoreInterval, 20*time.Millisecond, "scaled back")
	// One interval, plus the query, the apiserver's round trips and the
	// poll's own step.
	t.Logf("restored %s after Prometheus first answered with the demand", restored.Sub(appeared).Round(time.Millisecond))
	require.LessOrEqual(t, restored.Sub(appeared), restoreInterval+time.Second, "restored within one restore interval of the demand")

	// The workload is back before the engine records it.
	require.Eventually(t, func() bool {
		kinds := owner.Kinds()
		return eng.List()[0].Restore != nil && !eng.List()[0].Restore.RestoredAt.IsZero() && kinds[len(kinds)-1] == reclaim.MsgRestored
	}, 10*time.Second, 20*time.Millisecond, "recorded and told")
	last := owner.Sent[len(owner.Sent)-1]
	require.Equal(t, reclaim.MsgRestored, last.Kind)
	require.Contains(t, last.Text, "Deployment serve/chat-api scaled back to 1 replicas by restore_when ("+query+")")
	events, err := eng.Audit(10)
	require.NoError(t, err)
	require.Equal(t, "restored", events[0].Kind)
	require.Contains(t, events[0].Actor, "restore_when")
}

// createDeployment makes a one-replica Deployment and, without a
// controller manager, the ReplicaSet and pod it would; it returns the pod.
func createDeployment(t *testing.T, admin kubernetes.Interface, ns, name string) string {
	ctx := context.Background()
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	one := int32(1)
	labels := map[string]string{"app": name}
	d, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	controller := true
	rs, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-5d8f7c9b4", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: &controller}}},
		Spec:       appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: rs.Name + "-x2x7p", Labels: labels, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &controller}}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return p.Name
}

func replicas(t *testing.T, admin kubernetes.Interface, ns, name string) int32 {
	d, err := admin.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return *d.Spec.Replicas
}
