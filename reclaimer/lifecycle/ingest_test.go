package lifecycle_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// Two episodes of one alert in one notification: the newest is warned,
// the older is stale, nobody hears of it.
func TestTwoEpisodesInOneNotificationWarnOnce(t *testing.T) {
	f := newFixture(t, "")
	res := f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), reclaimtest.IdlePod("firing", reclaimtest.T0.Add(2*time.Minute), "ml", "nb-0"))
	require.Equal(t, 1, res.New)
	require.Equal(t, 1, res.Ignored, "the older episode is stale")
	f.at(2 * time.Minute)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds())
	require.Equal(t, reclaimtest.T0.Add(2*time.Minute), f.only().StartsAt)
}

// Two alerts about one unit and holder (their other labels differ, so do
// their fingerprints): one reclaim, one warning, in one notification or in two.
func TestTwoFingerprintsForOneUnitWarnOnce(t *testing.T) {
	for _, together := range []bool{true, false} {
		f := newFixture(t, "")
		a, b := reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0", "container", "sidecar")
		require.NotEqual(t, a.Fingerprint, b.Fingerprint)
		if together {
			f.ingest(a, b)
		} else {
			f.ingest(a)
			f.at(0)
			f.ingest(b)
		}
		f.at(time.Second)
		require.Len(t, f.eng.List(), 1)
		require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds())
		require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_decisions_total", "decision", "duplicate"))
	}
}

// A reclaimer of one cluster, sent a fleet's alerts by one Alertmanager:
// the alert of its own cluster is decided; the same pod's alert in another
// cluster, and one that names no cluster, are refused, counted and
// logged, never warned about or acted on; a resolved alert of another
// cluster cancels nothing.
func TestOnlyTheReclaimersClusterIsActedOn(t *testing.T) {
	f := newFixture(t, "cluster: b\n")
	res := f.ingest(
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "train-0", "cluster", "a"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "train-0", "cluster", "b", "uuid", "GPU-B1", "gpu_uuid", "GPU-B1"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "train-1"),
	)
	require.Equal(t, 1, res.New)
	require.Equal(t, 2, res.Ignored)
	require.Equal(t, 2.0, f.metric("gpureclaim_reclaimer_decisions_total", "decision", "other_cluster"))
	r := f.only()
	require.Equal(t, "b", r.Labels.Get("cluster"))
	require.Equal(t, "GPU-B1", r.Target.UUID)

	f.ingest(reclaimtest.IdlePod("resolved", reclaimtest.T0, "ml", "train-0", "cluster", "a", "uuid", "GPU-B1", "gpu_uuid", "GPU-B1"))
	require.Equal(t, reclaim.Pending, f.only().State, "another cluster's resolved alert cancels nothing")
	f.at(0)
	f.at(20 * time.Minute)
	require.Equal(t, []string{"evict ml/train-0"}, f.actor.Calls, "only cluster b's pod is acted on")
	for _, m := range f.notifier.Sent {
		require.Equal(t, "b", m.Reclaim.Labels.Get("cluster"), "nothing is said about another cluster")
	}
}
