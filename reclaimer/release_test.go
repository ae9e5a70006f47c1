package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/promtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/route"
)

// TestReleaseConfirmedByPrometheus evicts a pod on a real apiserver: the
// pod is gone at once, but while a real Prometheus still has the unit's
// holder series from the exporter the GPU does not count as released; once
// the exporter stops reporting the holder, it does.
func TestReleaseConfirmedByPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs kube-apiserver and Prometheus")
	}
	ctx := context.Background()
	cl := kubetest.Start(t, false)
	role, err := deploy.ReclaimerClusterRole("..")
	require.NoError(t, err)
	cl.BindReclaimerRole(t, role)
	admin := cl.Client(t, kubetest.AdminToken)
	_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.CoreV1().Pods("ml").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nb-0"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The node's exporter: it reports the pod on the unit until told not to.
	var holding atomic.Bool
	holding.Store(true)
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if holding.Load() {
			fmt.Fprint(w, "# TYPE gpureclaim_unit_owner_info gauge\ngpureclaim_unit_owner_info{uuid=\"GPU-1\",namespace=\"ml\",pod=\"nb-0\",container=\"c\",keep=\"false\"} 1\n")
		}
	}))
	defer exporter.Close()
	prom := promtest.Scraping(t, nil, promtest.Job{Name: "gpureclaim-exporter", URL: exporter.URL})
	q := &promquery.Client{URL: prom.URL, Timeout: 5 * time.Second}
	require.Eventually(t, func() bool {
		held, _, err := q.Holds(ctx, "GPU-1", map[string]string{"namespace": "ml", "pod": "nb-0"})
		return err == nil && held
	}, 30*time.Second, 100*time.Millisecond, "Prometheus has the holder")

	cfg := &config.Config{Workloads: config.BuiltinWorkloads()}
	kc, err := kube.New(cl.RESTConfig(kubetest.ReclaimerToken), kube.Options{Workloads: cfg.Workloads, EvictionDeadline: time.Minute, Clock: time.Now, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	act := route.New(route.Backends{Config: cfg, Kubernetes: kc, Holders: q})
	r := &reclaim.Reclaim{ID: "r1", Action: config.ActionEvict, ActAt: time.Now(), Target: reclaim.Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "nb-0"}}
	_, err = act.Act(ctx, r.Action, r)
	require.NoError(t, err)

	rel, err := act.Released(ctx, r)
	require.NoError(t, err)
	require.False(t, rel.Done, "the pod is gone, the exporter still sees it")
	require.Equal(t, `ml/nb-0 is gone, but Prometheus still sees it hold the unit (gpureclaim_unit_owner_info{uuid="GPU-1",namespace="ml",pod="nb-0"})`, rel.Why)

	holding.Store(false)
	require.Eventually(t, func() bool {
		rel, err := act.Released(ctx, r)
		return err == nil && rel.Done
	}, 30*time.Second, 200*time.Millisecond, "released once the holder series is gone")
}
