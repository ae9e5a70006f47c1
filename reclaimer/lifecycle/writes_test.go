package lifecycle_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/ledger"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

// gatedStore holds every write until the gate opens, as a kubernetes
// store does with thousands of reclaims to create; it has a journal.
type gatedStore struct {
	reclaim.Store
	gate   chan struct{}
	writes atomic.Int64
	*memJournal
}

func (g *gatedStore) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	<-g.gate
	g.writes.Add(1)
	return g.Store.Write(rs, evs)
}

// memJournal is a journal in memory, shared by the engines of a test as
// the kubernetes store's ConfigMaps are by replicas.
type memJournal struct {
	mu      sync.Mutex
	entries []reclaim.Journaled
	seq     int
}

func (m *memJournal) Journal(notification []byte) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	id := fmt.Sprint(m.seq)
	m.entries = append(m.entries, reclaim.Journaled{ID: id, Notification: notification})
	return id, nil
}

func (m *memJournal) Replay() ([]reclaim.Journaled, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.entries), nil
}

func (m *memJournal) Retire(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = slices.DeleteFunc(m.entries, func(e reclaim.Journaled) bool { return e.ID == id })
	return nil
}

func (m *memJournal) ids() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, e := range m.entries {
		out = append(out, e.ID)
	}
	return out
}

// A notification whose write outlasts webhook.answer_within is recorded in
// the store's journal and answered yes while it is still written; nothing
// about it is warned, and no command changes it, before it is in the
// store; once it is, the journal entry is retired.
func TestAnswerBeforeTheWriteEnds(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 200ms}\n")
	g := &gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: &memJournal{}}
	f.with(func(o *lifecycle.Options) { o.Store = g; o.Journal, _ = o.Store.(reclaim.Journal) })

	res, err := f.eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")})
	require.NoError(t, err, "answered while the write goes on")
	require.Equal(t, 1, res.New)
	require.Equal(t, reclaim.Pending, f.only().State, "decided: the index has it")
	require.Equal(t, []string{"1"}, g.ids(), "in the journal")

	f.at(0)
	require.Empty(t, f.notifier.Kinds(), "no warning before the decision is written")

	snoozed := make(chan error, 1)
	go func() {
		_, err := f.eng.Snooze(context.Background(), f.only().ID, "U1", reclaimtest.T0.Add(time.Hour), "")
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
	require.Empty(t, g.ids(), "the journal entry retired once written")
}

// webhook.answer_within counts from when the request began, as
// Alertmanager's timeout does: a notification that waited its whole
// answer_within for a turn is journaled as soon as it is decided.
func TestAnswerWithinCountsFromTheRequest(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 30s}\n")
	g := &gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: &memJournal{}}
	defer close(g.gate)
	f.with(func(o *lifecycle.Options) { o.Store = g; o.Journal, _ = o.Store.(reclaim.Journal) })
	answered := make(chan error, 1)
	go func() {
		_, err := f.eng.IngestNotification(&notification.Notification{Alerts: []notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")},
			Version: "4", Received: time.Now().Add(-time.Hour)})
		answered <- err
	}()
	select {
	case err := <-answered:
		require.NoError(t, err)
	case <-time.After(20 * time.Second): // short of the 30 s answer_within
		t.Fatal("the answer waited for the write, past answer_within from the request")
	}
	require.Len(t, g.ids(), 1, "in the journal")
}

// A notification larger than deciding takes within answer_within is put
// in the journal and answered first, then decided and written; the entry
// is retired once it is.
func TestALargeNotificationIsJournaledFirst(t *testing.T) {
	f := newFixture(t, "")
	g := &gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: &memJournal{}}
	f.with(func(o *lifecycle.Options) { o.Store = g; o.Journal, _ = o.Store.(reclaim.Journal) })
	var alerts []notification.Alert
	for i := range ledger.JournalFirst + 1 {
		alerts = append(alerts, reclaimtest.IdlePod("firing", reclaimtest.T0, fmt.Sprint("ns-", i%50), fmt.Sprint("nb-", i)))
	}
	res, err := f.eng.Ingest(alerts)
	require.NoError(t, err)
	require.Equal(t, lifecycle.IngestResult{Journaled: len(alerts)}, res, "answered before it is decided")
	require.Equal(t, []string{"1"}, g.ids(), "in the journal when answered")

	close(g.gate)
	require.NoError(t, f.eng.Flush(), "decided, then written")
	stored, err := f.st.Load()
	require.NoError(t, err)
	require.Len(t, stored, len(alerts))
	require.Empty(t, g.ids(), "retired once written")
	require.Len(t, f.eng.List(), len(alerts))
}

// A replica that answered a notification from the journal and stopped
// before writing its decisions: the next one replays the journal, decides
// the alerts and writes them, and retires the entry.
func TestTheJournalIsReplayed(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 100ms}\n")
	journal := &memJournal{}
	g := &gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: journal}
	f.with(func(o *lifecycle.Options) { o.Store = g; o.Journal, _ = o.Store.(reclaim.Journal) })
	_, err := f.eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-1")})
	require.NoError(t, err)
	require.Len(t, journal.ids(), 1)
	// That replica stops; its write never ends.

	open := &gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: journal}
	close(open.gate)
	f.with(func(o *lifecycle.Options) { o.Store = open; o.Journal, _ = o.Store.(reclaim.Journal) })
	require.NoError(t, f.eng.Flush())
	stored, err := f.st.Load()
	require.NoError(t, err)
	require.Len(t, stored, 2, "decided from the journal and written")
	require.Empty(t, journal.ids(), "retired")
	f.at(0)
	require.Len(t, f.notifier.Kinds(), 2, "both owners warned")
}

// A retry of a notification whose write has not ended waits for it: the
// answer is never yes before the decisions it is about are written, or on
// their way with no error.
func TestRetryWaitsForTheFirstWrite(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 30s}\n")
	g := &gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: &memJournal{}}
	f.with(func(o *lifecycle.Options) { o.Store = g; o.Journal, _ = o.Store.(reclaim.Journal) })
	alert := reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")
	first := make(chan error, 1)
	go func() { _, err := f.eng.Ingest([]notification.Alert{alert}); first <- err }()
	require.Eventually(t, func() bool { return len(f.eng.List()) == 1 }, 5*time.Second, 10*time.Millisecond)

	retry := make(chan lifecycle.IngestResult, 1)
	go func() {
		res, err := f.eng.Ingest([]notification.Alert{alert})
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

// slowBolt is the bbolt store with its reclaim writes held until the gate
// opens, as 100,000 reclaims hold it for seconds; its journal is bbolt's.
type slowBolt struct {
	*store.Bolt
	gate chan struct{}
}

func (s *slowBolt) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	<-s.gate
	return s.Bolt.Write(rs, evs)
}

// On bbolt a notification whose reclaims take longer than
// webhook.answer_within to write is answered from the journal in the same
// file; a reclaimer that stops before writing them decides the alerts
// again from the journal at its next start, writes them and retires the
// entry.
func TestTheBboltJournalIsReplayedAfterAStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	cfg := reclaimtest.Config(t, "webhook: {bearer_token_file: token, answer_within: 100ms}\n")
	engine := func(st interface {
		reclaim.Store
		reclaim.Journal
	}) *lifecycle.Engine {
		eng, err := lifecycle.New(lifecycle.Options{Config: cfg, Store: st, Journal: st, Actor: &reclaimtest.Actor{}, Clock: reclaimtest.NewClock().Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())})
		require.NoError(t, err)
		return eng
	}
	b, err := store.Open(path, time.Second)
	require.NoError(t, err)
	slow := &slowBolt{Bolt: b, gate: make(chan struct{})}
	_, err = engine(slow).Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-1")})
	require.NoError(t, err, "answered from the journal")
	entries, err := b.Replay()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	n, err := notification.Decode(entries[0].Notification)
	require.NoError(t, err)
	require.Len(t, n.Alerts, 2)
	// The reclaimer stops: its write never ends.
	require.NoError(t, b.Close())
	close(slow.gate)

	b, err = store.Open(path, time.Second)
	require.NoError(t, err)
	defer b.Close()
	eng := engine(b)
	require.NoError(t, eng.Flush())
	stored, err := b.Load()
	require.NoError(t, err)
	require.Len(t, stored, 2, "decided from the journal and written")
	entries, err = b.Replay()
	require.NoError(t, err)
	require.Empty(t, entries, "retired once written")
}

// losingJournal loses the lease as it journals: the replica may stop
// leading between its answer and its decisions.
type losingJournal struct {
	*memJournal
	lease *lease
}

func (l *losingJournal) Journal(notification []byte) (string, error) {
	defer l.lease.lose()
	return l.memJournal.Journal(notification)
}

// A large notification answered from the journal by a replica that then
// stops leading is decided by none of its writes: the entry stays for the
// next leader, which decides it.
func TestAJournaledNotificationIsLeftToTheNextLeader(t *testing.T) {
	f := newFixture(t, "")
	journal := &memJournal{}
	l := &lease{token: 1}
	f.with(func(o *lifecycle.Options) {
		o.Store = &struct {
			reclaim.Store
			*losingJournal
		}{f.st, &losingJournal{journal, l}}
		o.Journal = o.Store.(reclaim.Journal)
		o.Leadership = l
	})
	var alerts []notification.Alert
	for i := range ledger.JournalFirst + 1 {
		alerts = append(alerts, reclaimtest.IdlePod("firing", reclaimtest.T0, fmt.Sprint("ns-", i%50), fmt.Sprint("nb-", i)))
	}
	res, err := f.eng.Ingest(alerts)
	require.NoError(t, err, "durable in the journal")
	require.Equal(t, len(alerts), res.Journaled)
	require.NoError(t, f.eng.Flush())
	require.Empty(t, f.eng.List(), "not decided by a replica that may no longer lead")
	require.Len(t, journal.ids(), 1, "left in the journal")

	f.with(func(o *lifecycle.Options) {
		o.Store = &gatedStore{Store: f.st, gate: closedGate(), memJournal: journal}
		o.Journal = o.Store.(reclaim.Journal)
		o.Leadership = &lease{token: 2}
	})
	require.NoError(t, f.eng.Flush())
	require.Len(t, f.eng.List(), len(alerts), "decided by the next leader")
	require.Empty(t, journal.ids())
}

func closedGate() chan struct{} { c := make(chan struct{}); close(c); return c }

// listingJournal notes, at each entry, how many reclaims the engine held.
type listingJournal struct {
	*memJournal
	eng  func() *lifecycle.Engine
	held []int
}

func (l *listingJournal) Journal(notification []byte) (string, error) {
	l.held = append(l.held, len(l.eng().List()))
	return l.memJournal.Journal(notification)
}

// Large notifications are decided one at a time, and the next is not
// journaled (nor held in memory) before the last is decided.
func TestLargeNotificationsAreDecidedOneAtATime(t *testing.T) {
	f := newFixture(t, "")
	j := &listingJournal{memJournal: &memJournal{}, eng: func() *lifecycle.Engine { return f.eng }}
	f.with(func(o *lifecycle.Options) {
		o.Store = &struct {
			reclaim.Store
			*listingJournal
		}{f.st, j}
		o.Journal = o.Store.(reclaim.Journal)
	})
	// As the webhook gives it: the body is journaled as it came, at once.
	body := journalFirstPlusOne(t)
	var ns []*notification.Notification
	for range 2 { // the second Alertmanager's retry of the first, say
		n, err := notification.Decode(body)
		require.NoError(t, err)
		ns = append(ns, n)
	}
	for _, n := range ns {
		res, err := f.eng.IngestNotification(n)
		require.NoError(t, err)
		require.Equal(t, ledger.JournalFirst+1, res.Journaled)
	}
	require.NoError(t, f.eng.Flush())
	require.Equal(t, []int{0, ledger.JournalFirst + 1}, j.held, "the second journaled once the first was decided")
	require.Len(t, f.eng.List(), ledger.JournalFirst+1)
}

// journalFirstPlusOne is a notification of one alert more than is
// journaled first.
func journalFirstPlusOne(t *testing.T) []byte {
	return reclaimtest.Notification(t, ledger.JournalFirst+1, reclaimtest.T0)
}

// sizedStore holds writes until the gate opens, and keeps what each wrote.
type sizedStore struct {
	gatedStore
	mu     sync.Mutex
	writes [][]string // the reclaims of each write, as ID:state
	events []int
}

func (s *sizedStore) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	<-s.gate
	s.mu.Lock()
	var w []string
	for _, r := range rs {
		w = append(w, r.Target.Pod+":"+string(r.State))
	}
	s.writes, s.events = append(s.writes, w), append(s.events, len(evs))
	s.mu.Unlock()
	return s.Store.Write(rs, evs)
}

// Notifications queued behind a write go out together in the next, each
// reclaim once as the latest of them decided it, with every audit event:
// a thousand one-alert notifications share the store's writers as one of
// a thousand alerts does.
func TestNotificationsQueuedTogetherAreWrittenTogether(t *testing.T) {
	f := newFixture(t, "webhook: {bearer_token_file: token, answer_within: 50ms}\n")
	s := &sizedStore{gatedStore: gatedStore{Store: f.st, gate: make(chan struct{}), memJournal: &memJournal{}}}
	f.with(func(o *lifecycle.Options) { o.Store = s; o.Journal, _ = o.Store.(reclaim.Journal) })

	for _, a := range []notification.Alert{
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), // written first, alone
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-1"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-2"),
		reclaimtest.IdlePod("resolved", reclaimtest.T0, "ml", "nb-1"), // the same reclaim again
	} {
		_, err := f.eng.Ingest([]notification.Alert{a})
		require.NoError(t, err)
	}
	close(s.gate)
	require.NoError(t, f.eng.Flush())
	require.Equal(t, [][]string{{"nb-0:pending"}, {"nb-1:cancelled", "nb-2:pending"}}, s.writes,
		"the three queued behind the first in one write, nb-1 as the last decided it")
	require.Equal(t, 3, s.events[1], "every notification's audit events: two decided, one cancelled")
	stored, err := f.st.Load()
	require.NoError(t, err)
	require.Len(t, stored, 3)
	require.Empty(t, s.ids(), "every journal entry retired")
}
