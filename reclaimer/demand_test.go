package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/promtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

// TestDemand runs policies that depend on demand against a real
// Prometheus evaluating the shipped rules over kube-state-metrics' series
// (a stand-in target): an idle GPU whose policy requires demand is warned
// and then kept while no pending pod asks for a GPU, and reclaimed within
// an interval of one asking; a policy whose grace shortens under demand
// states the shorter time in its warning, and acts then.
func TestDemand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Prometheus")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// kube-state-metrics: a pod asking for one whole GPU, pending once
	// pending is set.
	var pending atomic.Bool
	ksm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		phase := 0
		if pending.Load() {
			phase = 1
		}
		fmt.Fprintf(w, "kube_pod_container_resource_requests{namespace=\"ml\",pod=\"train-0\",container=\"c\",resource=\"nvidia_com_gpu\",unit=\"integer\"} 1\n")
		fmt.Fprintf(w, "kube_pod_status_phase{namespace=\"ml\",pod=\"train-0\",uid=\"1\",phase=\"Pending\"} %d\n", phase)
	}))
	defer ksm.Close()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	prom := promtest.Scraping(t, []string{filepath.Join(root, "rules", "gpureclaim.rules.yml")}, promtest.Job{Name: "kube-state-metrics", URL: ksm.URL, HonorLabels: true})

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("t\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "reclaimer.yml"), []byte(fmt.Sprintf(`webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: "http://127.0.0.1:1"}
kubernetes: {enabled: false}
prometheus: {url: %q, interval: 1s}
policies:
  - {name: wait, matchers: ['alertname="GPUIdle"', 'namespace="lab"'], action: evict, grace: 0s, min_runtime: 0s, demand: {required: true}}
  - {name: hurry, matchers: ['alertname="GPUIdle"', 'namespace="web"'], action: evict, grace: 1h, min_runtime: 0s, demand: {grace: 0s}}
`, prom.URL)), 0o600))
	cfg, err := config.Load(filepath.Join(dir, "reclaimer.yml"))
	require.NoError(t, err)
	st, err := store.Open(filepath.Join(dir, "state.db"), time.Second)
	require.NoError(t, err)
	defer st.Close()
	owner, actor := reclaimtest.NewNotifier("owner"), &reclaimtest.Actor{}
	eng, err := lifecycle.New(lifecycle.Options{
		Config: cfg, Store: st, Journal: st, Checker: &reclaimtest.Checker{}, Actor: actor, Planner: actor, Restorer: actor, Notifiers: []reclaim.Notifier{owner},
		Clock: time.Now, Logger: slog.New(slog.DiscardHandler), Prometheus: &promquery.Client{URL: prom.URL, Timeout: 5 * time.Second},
	})
	require.NoError(t, err)
	state := func(pod string) *reclaim.Reclaim {
		for _, r := range eng.List() {
			if r.Target.Pod == pod {
				return r
			}
		}
		return nil
	}

	_, err = eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", time.Now(), "lab", "nb-0")})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		eng.Step(ctx)
		r := state("nb-0")
		return r.Warning.Sent && strings.Contains(r.Reason, "waiting until a GPU of its kind is wanted")
	}, 30*time.Second, 100*time.Millisecond, "warned, then waiting for demand")
	require.Contains(t, owner.Text(reclaim.MsgWarning), "It is reclaimed only once others wait for a GPU of this kind.")
	for range 3 {
		time.Sleep(time.Second)
		eng.Step(ctx)
	}
	require.Empty(t, actor.Calls, "nobody waits for a GPU: the owner keeps it")

	// The engine asks Prometheus itself at each step: it may see the
	// demand before a query of the test's would, so the test asks after.
	// Demand only grows here (the pod stays pending), and without it the
	// engine did not act (above).
	pending.Store(true)
	require.Eventually(t, func() bool {
		eng.Step(ctx)
		return len(actor.Calls) == 1
	}, 30*time.Second, 100*time.Millisecond, "a pending pod asks for a GPU: reclaimed")
	q := &promquery.Client{URL: prom.URL, Timeout: 5 * time.Second}
	wanted, err := q.Demand(ctx, config.WantedQuery("gpu", ""))
	require.NoError(t, err)
	require.True(t, wanted, "Prometheus says a GPU is wanted")
	require.Equal(t, []string{"evict lab/nb-0"}, actor.Calls)

	// A GPU is wanted now: the policy's 1h grace shortens to nothing.
	_, err = eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", time.Now(), "web", "serve-0")})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		eng.Step(ctx)
		return len(actor.Calls) == 2
	}, 30*time.Second, 100*time.Millisecond, "acted at once, not an hour later")
	r := state("serve-0")
	require.True(t, r.Wanted)
	require.WithinDuration(t, r.Warning.At, r.ActAt, time.Second, "the warning stated the shortened time")
	require.Contains(t, owner.Text(reclaim.MsgWarning), "Others are waiting for a GPU of this kind, so the grace is shorter.")
}
