package store

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func open(t *testing.T, path string) *Bolt {
	t.Helper()
	b, err := Open(path, time.Second)
	require.NoError(t, err)
	return b
}

func TestWriteLoadAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b := open(t, path)
	r := &reclaim.Reclaim{ID: "r1", State: reclaim.Pending, ActAt: t0.Add(time.Hour), Target: reclaim.Target{UUID: "GPU-1", Node: "n1", Pod: "p"}}
	require.NoError(t, b.Write([]*reclaim.Reclaim{r}, []reclaim.Event{{Time: t0, Reclaim: "r1", Kind: "warned"}}))
	r.State = reclaim.Done
	require.NoError(t, b.Write([]*reclaim.Reclaim{r}, nil), "a write replaces the reclaim")
	require.NoError(t, b.Close())

	b = open(t, path)
	defer b.Close()
	rs, err := b.Load()
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, reclaim.Done, rs[0].State)
	require.True(t, rs[0].ActAt.Equal(t0.Add(time.Hour)))
	require.Equal(t, "GPU-1", rs[0].Target.UUID)
}

func TestOneProcessHoldsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b := open(t, path)
	defer b.Close()
	_, err := Open(path, 50*time.Millisecond)
	require.ErrorContains(t, err, path)
}

func TestAuditNewestFirstInWriteOrder(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer b.Close()
	// Two events in the same instant keep the order they were written in.
	require.NoError(t, b.Write(nil, []reclaim.Event{{Time: t0, Kind: "a"}, {Time: t0, Kind: "b"}}))
	require.NoError(t, b.Write(nil, []reclaim.Event{{Time: t0.Add(time.Second), Kind: "c"}}))
	require.NoError(t, b.Write(nil, []reclaim.Event{{Time: t0.Add(-time.Second), Kind: "early"}}))
	evs, err := b.Audit(10)
	require.NoError(t, err)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{"c", "b", "a", "early"}, kinds)
	evs, err = b.Audit(2)
	require.NoError(t, err)
	require.Len(t, evs, 2)
}

func TestPruneDropsOnlyWhatEndedAndWasTold(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer b.Close()
	cut := t0.Add(24 * time.Hour)
	told := reclaim.Delivery{Sent: true}
	rs := []*reclaim.Reclaim{
		{ID: "old-done", State: reclaim.Done, Closed: t0, Final: told},
		{ID: "old-done-untold", State: reclaim.Done, Closed: t0},                         // the owner is still to be told
		{ID: "new-done", State: reclaim.Done, Closed: cut.Add(time.Minute), Final: told}, // ended after the cut
		{ID: "old-pending", State: reclaim.Pending},                                      // not over
	}
	require.NoError(t, b.Write(rs, []reclaim.Event{{Time: t0, Kind: "old"}, {Time: cut.Add(time.Minute), Kind: "new"}}))
	n, err := b.Prune(cut)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	left, err := b.Load()
	require.NoError(t, err)
	var ids []string
	for _, r := range left {
		ids = append(ids, r.ID)
	}
	require.ElementsMatch(t, []string{"old-done-untold", "new-done", "old-pending"}, ids)
	evs, err := b.Audit(10)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	require.Equal(t, "new", evs[0].Kind)
}

// A prune larger than one transaction deletes all it should, batch after
// batch, reclaims and events.
func TestPruneInBatches(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer b.Close()
	cut := t0.Add(24 * time.Hour)
	var rs []*reclaim.Reclaim
	var evs []reclaim.Event
	for i := range 2*pruneBatch + 500 {
		rs = append(rs, &reclaim.Reclaim{ID: fmt.Sprintf("old-%d", i), State: reclaim.Notified, Closed: t0, Final: reclaim.Delivery{Sent: true}})
		evs = append(evs, reclaim.Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "old"})
	}
	rs = append(rs, &reclaim.Reclaim{ID: "open", State: reclaim.Pending})
	evs = append(evs, reclaim.Event{Time: cut, Kind: "new"})
	require.NoError(t, b.Write(rs, evs))
	n, err := b.Prune(cut)
	require.NoError(t, err)
	require.Equal(t, 2*pruneBatch+500, n)
	left, err := b.Load()
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, "open", left[0].ID)
	kept, err := b.Audit(10)
	require.NoError(t, err)
	require.Len(t, kept, 1)
	require.Equal(t, "new", kept[0].Kind)
}

func TestFirstSightRefusesAReplayUntilItExpires(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b := open(t, path)
	first, err := b.FirstSight("sig-1", t0, t0.Add(5*time.Minute))
	require.NoError(t, err)
	require.True(t, first)
	first, err = b.FirstSight("sig-1", t0.Add(time.Minute), t0.Add(6*time.Minute))
	require.NoError(t, err)
	require.False(t, first, "a replay within its window")
	require.NoError(t, b.Close())

	b = open(t, path)
	defer b.Close()
	first, err = b.FirstSight("sig-1", t0.Add(2*time.Minute), t0.Add(7*time.Minute))
	require.NoError(t, err)
	require.False(t, first, "remembered across a restart")
	first, err = b.FirstSight("sig-1", t0.Add(5*time.Minute), t0.Add(10*time.Minute))
	require.NoError(t, err)
	require.True(t, first, "an expired key is forgotten")
}

// A write larger than a transaction lands whole, with every event, and the
// two episodes of one alert that straddle a chunk's end share one
// transaction.
func TestALargeWriteIsSplitAndWhole(t *testing.T) {
	b := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer b.Close()
	var rs []*reclaim.Reclaim
	var evs []reclaim.Event
	for i := range 2*writeChunk + 10 {
		id := fmt.Sprintf("%016x-1772445600", i)
		fp := fmt.Sprintf("%016x", i)
		if i == writeChunk { // the second episode of the alert before it
			fp = fmt.Sprintf("%016x", i-1)
		}
		rs = append(rs, &reclaim.Reclaim{ID: id, Fingerprint: fp, State: reclaim.Pending})
		evs = append(evs, reclaim.Event{Time: t0, Reclaim: id, Kind: "decided"})
	}
	require.Equal(t, writeChunk+1, chunkEnd(rs), "the alert's two episodes in one transaction")
	require.NoError(t, b.Write(rs, evs))
	stored, err := b.Load()
	require.NoError(t, err)
	require.Len(t, stored, len(rs))
	audit, err := b.Audit(len(evs) + 1)
	require.NoError(t, err)
	require.Len(t, audit, len(evs))
}

var update = flag.Bool("update", false, "rewrite testdata/gpureclaim-v1alpha1.json")

// A reclaim stored as this release stores it (testdata, the public
// GPUReclaim) loads whole, and is written back byte for byte: a change to
// the stored format shows here first. A record of any other shape is
// refused with its key named.
func TestLoadsThisReleasesFormat(t *testing.T) {
	r := &reclaim.Reclaim{ID: "5e8f0a8f0c0b2a11-1764496800", Fingerprint: "5e8f0a8f0c0b2a11", StartsAt: t0, Policy: "idle", Action: config.ActionStop,
		Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Node: "n1", Kind: "gpu", Namespace: "ml", Pod: "train-7-abcde", Container: "main", Suggested: config.ActionEvict},
		State:  reclaim.Done, Reason: "Job ml/train-7 suspended", Created: t0, Updated: t0.Add(16 * time.Minute), ActAt: t0.Add(15 * time.Minute),
		ActedAt: t0.Add(15 * time.Minute), ReleasedAt: t0.Add(16 * time.Minute), Closed: t0.Add(16 * time.Minute),
		Warning: reclaim.Delivery{Sent: true, At: t0.Add(time.Minute)}, Final: reclaim.Delivery{Sent: true, At: t0.Add(16 * time.Minute)},
		TopOwner: &reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train-7", Stop: reclaim.StopPatch, Stopped: "suspended"},
		Stopped:  &reclaim.Stopped{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train-7", Stop: reclaim.StopPatch, StopVerb: "suspended", RestoreVerb: "resumed"},
		HeldBy:   []string{"ml/train-7-abcde/u1"}, Snooze: &reclaim.Snooze{Silence: "s1", By: "ana", Until: t0.Add(time.Hour)}}
	events := []reclaim.Event{{Time: t0.Add(15 * time.Minute), Reclaim: r.ID, Kind: "done", Detail: "stop on the top owner, Job ml/train-7", Actor: "reclaimer"}}
	golden := "testdata/gpureclaim-v1alpha1.json"
	if *update {
		b := open(t, filepath.Join(t.TempDir(), "state.db"))
		require.NoError(t, b.Write([]*reclaim.Reclaim{r}, events))
		require.NoError(t, b.db.View(func(tx *bolt.Tx) error {
			return os.WriteFile(golden, tx.Bucket(bucketReclaims).Get([]byte(r.ID)), 0o644)
		}))
		require.NoError(t, b.Close())
	}
	stored, err := os.ReadFile(golden)
	require.NoError(t, err)

	b := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer b.Close()
	require.NoError(t, b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketReclaims).Put([]byte(r.ID), stored) }))
	rs, err := b.Load()
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, r, rs[0])
	require.NoError(t, b.Write(rs, events))
	require.NoError(t, b.db.View(func(tx *bolt.Tx) error {
		require.JSONEq(t, string(stored), string(tx.Bucket(bucketReclaims).Get([]byte(r.ID))), "run go test -run TestLoadsThisReleasesFormat -update after a deliberate change")
		return nil
	}))

	// The engine's own JSON, as stores kept it before the public type, is
	// no format of any release.
	require.NoError(t, b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReclaims).Put([]byte("fp-2"), []byte(`{"id":"fp-2","state":"pending"}`))
	}))
	_, err = b.Load()
	require.ErrorContains(t, err, "fp-2")
}

// The journal keeps notifications, as they came, across a reopen, gives
// them back oldest first, and forgets a retired one.
func TestJournalAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	b := open(t, path)
	small := []byte(`{"version":"4","alerts":[]}`)
	large := bytes.Repeat([]byte("x"), 10<<20) // overflow pages
	first, err := b.Journal(small)
	require.NoError(t, err)
	second, err := b.Journal(large)
	require.NoError(t, err)
	require.NotEqual(t, first, second)
	require.NoError(t, b.Close())

	b = open(t, path)
	defer b.Close()
	entries, err := b.Replay()
	require.NoError(t, err)
	require.Len(t, entries, 2)
	require.Equal(t, reclaim.Journaled{ID: first, Notification: small}, entries[0], "oldest first")
	require.Equal(t, second, entries[1].ID)
	require.True(t, bytes.Equal(large, entries[1].Notification), "as it came")

	require.NoError(t, b.Retire(first))
	entries, err = b.Replay()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, second, entries[0].ID)
	third, err := b.Journal(small)
	require.NoError(t, err)
	entries, err = b.Replay()
	require.NoError(t, err)
	require.Equal(t, []string{second, third}, []string{entries[0].ID, entries[1].ID}, "a new entry after the ones left")
	require.ErrorContains(t, b.Retire("x"), `journal entry "x"`)
}
