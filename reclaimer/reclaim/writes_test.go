package reclaim_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/template"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	. "github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// gatedStore holds every write until the gate opens, as a kubernetes
// store does with thousands of reclaims to create.
type gatedStore struct {
	reclaim.Store
	gate   chan struct{}
	writes atomic.Int64
}

func (g *gatedStore) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	<-g.gate
	g.writes.Add(1)
	return g.Store.Write(rs, evs)
}

// A notification whose write outlasts webhook.answer_within is answered
// yes while it is still written; nothing about it is warned, and no command
// changes it, before it is in the store.
func TestAnswerBeforeTheWriteEnds(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 200ms}\n")
	g := &gatedStore{Store: f.st, gate: make(chan struct{})}
	f.with(func(o *reclaim.Options) { o.Store = g })

	res, err := f.eng.Ingest([]template.Alert{IdlePod("firing", T0, "ml", "nb-0")})
	require.NoError(t, err, "answered while the write goes on")
	require.Equal(t, 1, res.New)
	require.Equal(t, reclaim.Pending, f.only().State, "decided: the index has it")

	f.at(0)
	require.Empty(t, f.notifier.Kinds(), "no warning before the decision is written")

	snoozed := make(chan error, 1)
	go func() {
		_, err := f.eng.Snooze(context.Background(), f.only().ID, "U1", T0.Add(time.Hour), "")
		snoozed <- err
	}()
	select {
	case err := <-snoozed:
		t.Fatalf("a command went through before the decision was written: %v", err)
	case <-time.After(100 * time.Millisecond):
	}

	close(g.gate)
	require.NoError(t, <-snoozed, "the command waited for the write, then went through")
	require.NoError(t, f.eng.Flush())
	require.Equal(t, int64(2), g.writes.Load(), "the decision, then the snooze, in that order")
	stored, err := f.st.Load()
	require.NoError(t, err)
	require.Len(t, stored, 1)
	require.Equal(t, reclaim.Snoozed, stored[0].State, "the later write is the one the store keeps")
}

// A retry of a notification whose write has not ended waits for it: the
// answer is never yes before the decisions it is about are written, or on
// their way with no error.
func TestRetryWaitsForTheFirstWrite(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 30s}\n")
	g := &gatedStore{Store: f.st, gate: make(chan struct{})}
	f.with(func(o *reclaim.Options) { o.Store = g })
	alert := IdlePod("firing", T0, "ml", "nb-0")
	first := make(chan error, 1)
	go func() { _, err := f.eng.Ingest([]template.Alert{alert}); first <- err }()
	require.Eventually(t, func() bool { return len(f.eng.List()) == 1 }, 5*time.Second, 10*time.Millisecond)

	retry := make(chan reclaim.IngestResult, 1)
	go func() {
		res, err := f.eng.Ingest([]template.Alert{alert})
		require.NoError(t, err)
		retry <- res
	}()
	select {
	case <-retry:
		t.Fatal("the retry was answered before the first write ended")
	case <-time.After(100 * time.Millisecond):
	}
	close(g.gate)
	require.NoError(t, <-first)
	require.Equal(t, 1, (<-retry).Duplicate)
	require.Equal(t, int64(1), g.writes.Load(), "written once")
}
