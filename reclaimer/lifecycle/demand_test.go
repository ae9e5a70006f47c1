package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// demand answers restore_when queries from a set of queries that return a sample.
type demand struct {
	mu      sync.Mutex
	wanted  map[string]bool
	err     error
	queries []string
}

func (d *demand) Demand(_ context.Context, q string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries = append(d.queries, q)
	return d.wanted[q], d.err
}

const restorePolicy = `prometheus: {url: "http://prometheus:9090"}
policies:
  - name: services
    matchers: ['alertname="GPUIdle"']
    action: auto
    grace: 5m
    restore_when: 'sum(rate(requests_total{namespace="{{ .namespace }}", service="{{ .workload_name }}"}[1m])) > 0'
    restore_within: 2h
`

// apiDemand is restorePolicy's restore_when, filled for serve/api.
const apiDemand = `sum(rate(requests_total{namespace="serve", service="api"}[1m])) > 0`

// scaledDown is a fixture whose one-replica Deployment serve/api the
// policy has scaled down, five minutes after reclaimtest.T0.
func scaledDown(t *testing.T) *fixture {
	f := newFixture(t, restorePolicy)
	f.inspector.Controllers = map[string]reclaim.TopOwner{
		"serve/api-0": {APIVersion: "apps/v1", Kind: "Deployment", Namespace: "serve", Name: "api", Replicas: 1, Stop: reclaim.StopScale, Stopped: "scaled down"},
	}
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "serve", "api-0"))
	f.at(0)
	f.at(5 * time.Minute)
	require.Equal(t, reclaim.Done, f.of("serve/api-0").State)
	return f
}

// A scaled-down service is restored once its demand is back, and the
// owner is told; until then, and after restore_within, nothing is done.
func TestRestoreOnDemand(t *testing.T) {
	f := scaledDown(t)
	query := apiDemand

	d := &demand{wanted: map[string]bool{}}
	require.Empty(t, f.eng.RestoreOnDemand(context.Background(), d), "no demand: nothing restored")
	require.Equal(t, []string{query}, d.queries, "the template is filled from the reclaim")

	d.err = errors.New("connection refused")
	require.Empty(t, f.eng.RestoreOnDemand(context.Background(), d))
	require.NoError(t, testutil.GatherAndCompare(f.reg, strings.NewReader(`
# HELP gpureclaim_reclaimer_errors_total `+errorsHelp(t, f)+`
# TYPE gpureclaim_reclaimer_errors_total counter
gpureclaim_reclaimer_errors_total{component="prometheus"} 1
`), "gpureclaim_reclaimer_errors_total"))

	d.err = nil
	d.wanted[query] = true
	f.clock.Set(reclaimtest.T0.Add(20 * time.Minute))
	restored := f.eng.RestoreOnDemand(context.Background(), d)
	require.Len(t, restored, 1)
	require.Equal(t, reclaimtest.T0.Add(20*time.Minute), restored[0].Restore.RestoredAt)
	require.Equal(t, []string{"scale_down serve/api-0", "restore serve/api-0"}, f.actor.Calls)
	require.Equal(t, reclaim.MsgRestored, f.notifier.Sent[len(f.notifier.Sent)-1].Kind)
	require.Contains(t, f.notifier.Sent[len(f.notifier.Sent)-1].Text, "scaled back to 1 replicas by restore_when ("+query+")")

	n := len(d.queries)
	require.Empty(t, f.eng.RestoreOnDemand(context.Background(), d), "restored once: never twice")
	require.Len(t, d.queries, n, "a restored reclaim is not asked about again")
}

// After restore_within, the reclaim is no longer watched: the owner
// restores by hand.
func TestRestoreOnDemandWindow(t *testing.T) {
	f := scaledDown(t)
	f.clock.Set(reclaimtest.T0.Add(5*time.Minute + 2*time.Hour + time.Second))
	d := &demand{wanted: map[string]bool{apiDemand: true}}
	require.Empty(t, f.eng.RestoreOnDemand(context.Background(), d))
	require.Empty(t, d.queries)
}

// errorsHelp is the errors counter's help text, as registered.
func errorsHelp(t *testing.T, f *fixture) string {
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "gpureclaim_reclaimer_errors_total" {
			return mf.GetHelp()
		}
	}
	t.Fatal("no errors counter")
	return ""
}
