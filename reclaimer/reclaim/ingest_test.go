package reclaim_test

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
