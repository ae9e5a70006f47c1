package promquery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/testkit/promtest"
)

// A pod's last GPU activity, asked of a real Prometheus that scrapes a
// unit held by ml/nb-0 busy, then idle, and one held by ml/idle never
// busy: the answer follows the change, a pod never active has no time,
// a pod that held nothing is not held, and a value made to leave its
// literal stays inside it.
func TestLastActiveOnPrometheus(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		activity := 0.0
		if busy.Load() {
			activity = 0.6
		}
		fmt.Fprintf(w, "%s{uuid=\"GPU-a\",namespace=\"ml\",pod=\"nb-0\"} 1\n", names.UnitOwnerInfo)
		fmt.Fprintf(w, "%s{uuid=\"GPU-b\",namespace=\"ml\",pod=\"idle\"} 1\n", names.UnitOwnerInfo)
		fmt.Fprintf(w, "%s{uuid=\"GPU-a\"} %g\n", names.RecActivity, activity)
		fmt.Fprintf(w, "%s{uuid=\"GPU-b\"} 0.01\n", names.RecActivity)
	}))
	t.Cleanup(target.Close)
	prom := promtest.Scraping(t, nil, promtest.Job{Name: "exporter", URL: target.URL})
	c := &Client{URL: prom.URL, Timeout: 5 * time.Second}
	ctx := context.Background()
	ask := func(ns, pod string) (time.Time, bool) {
		last, held, err := c.LastActive(ctx, ns, pod, names.IdleThreshold, time.Minute, time.Second)
		require.NoError(t, err)
		return last, held
	}

	require.Eventually(t, func() bool { last, _ := ask("ml", "nb-0"); return !last.IsZero() }, 30*time.Second, 200*time.Millisecond, "%s", prom.Log())
	last, held := ask("ml", "nb-0")
	require.True(t, held)
	require.WithinDuration(t, time.Now(), last, 5*time.Second, "busy now")

	busy.Store(false)
	idleFrom := time.Now()
	time.Sleep(8 * time.Second)
	last, _ = ask("ml", "nb-0")
	require.WithinDuration(t, idleFrom, last, 5*time.Second, "the last busy sample, not now")

	last, held = ask("ml", "idle")
	require.True(t, held)
	require.True(t, last.IsZero(), "held, never above the threshold")

	_, held = ask("ml", "nobody")
	require.False(t, held)
	_, held = ask(`ml"}) or vector(1) #`, "nb-0")
	require.False(t, held, "the value stays a literal")
}

// On an engine that holds a fleet's series, the same pod name on the same
// GPU UUID in two clusters, busy in a and idle in b: a client scoped to a
// cluster reads that cluster's activity alone, where an unscoped one would
// call b's pod active.
func TestLastActiveInItsCluster(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for cluster, activity := range map[string]float64{"a": 0.6, "b": 0.01} {
			fmt.Fprintf(w, "%s{%s=%q,uuid=\"GPU-a\",namespace=\"ml\",pod=\"nb-0\"} 1\n", names.UnitOwnerInfo, names.LabelCluster, cluster)
			fmt.Fprintf(w, "%s{%s=%q,uuid=\"GPU-a\"} %g\n", names.RecActivity, names.LabelCluster, cluster, activity)
		}
	}))
	t.Cleanup(target.Close)
	prom := promtest.Scraping(t, nil, promtest.Job{Name: "fleet", URL: target.URL, HonorLabels: true})
	ctx := context.Background()
	ask := func(cluster string) (time.Time, bool) {
		c := &Client{URL: prom.URL, Timeout: 5 * time.Second}
		if cluster != "" {
			c.Scope = labels.MustNewMatcher(labels.MatchEqual, names.LabelCluster, cluster)
		}
		last, held, err := c.LastActive(ctx, "ml", "nb-0", names.IdleThreshold, time.Minute, time.Second)
		require.NoError(t, err)
		return last, held
	}
	require.Eventually(t, func() bool { last, _ := ask("a"); return !last.IsZero() }, 30*time.Second, 200*time.Millisecond, "%s", prom.Log())
	last, held := ask("b")
	require.True(t, held, "b's pod holds its GPU")
	require.True(t, last.IsZero(), "b's pod was never active: a's activity is not read")
	last, _ = ask("")
	require.False(t, last.IsZero(), "unscoped, the fleet's series mix: the reason for the scope")
}
