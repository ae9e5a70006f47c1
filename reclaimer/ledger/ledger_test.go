package ledger_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/ledger"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var t0 = time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)

// store records each write's reclaims (id@state) and can hold writes
// until released, or refuse them.
type store struct {
	mu      sync.Mutex
	writes  [][]string
	hold    chan struct{} // nil: write at once
	started chan struct{} // a write has begun
	refuse  error
}

func (s *store) Load() ([]*reclaim.Reclaim, error)  { return nil, nil }
func (s *store) Audit(int) ([]reclaim.Event, error) { return nil, nil }
func (s *store) Prune(time.Time) (int, error)       { return 0, nil }
func (s *store) Close() error                       { return nil }
func (s *store) Write(rs []*reclaim.Reclaim, _ []reclaim.Event) error {
	if s.started != nil {
		select {
		case s.started <- struct{}{}:
		default:
		}
	}
	if s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse != nil {
		return s.refuse
	}
	var w []string
	for _, r := range rs {
		w = append(w, r.ID+"@"+string(r.State))
	}
	s.writes = append(s.writes, w)
	return nil
}

func (s *store) written() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// journal keeps entries in memory.
type journal struct {
	mu      sync.Mutex
	entries map[string][]byte
	n       int
}

func (j *journal) Journal(b []byte) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.n++
	id := string(rune('a' + j.n))
	j.entries[id] = b
	return id, nil
}

func (j *journal) Replay() ([]reclaim.Journaled, error) { return nil, nil }

func (j *journal) Retire(id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.entries, id)
	return nil
}

func (j *journal) left() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.entries)
}

func rec(id, fp string, st reclaim.State, created time.Duration) *reclaim.Reclaim {
	return &reclaim.Reclaim{ID: id, Fingerprint: fp, State: st, Created: t0.Add(created),
		Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-" + fp, Node: "n1", Namespace: "ml", Pod: fp}}
}

func newLedger(st *store, j reclaim.Journal, mu *sync.Mutex, with func(*ledger.Options)) *ledger.Ledger {
	o := ledger.Options{Store: st, Lock: mu, Clock: func() time.Time { return t0 }}
	if j != nil {
		o.Journal = j
	}
	if with != nil {
		with(&o)
	}
	return ledger.New(o, nil)
}

// The index and the indexes kept with it follow every Set and Remove;
// the sorted view is newest first, and shared until the index changes.
func TestIndex(t *testing.T) {
	var mu sync.Mutex
	l := ledger.New(ledger.Options{Store: &store{}, Lock: &mu, Clock: time.Now},
		[]*reclaim.Reclaim{rec("a-1", "a", reclaim.Pending, 0), rec("b-1", "b", reclaim.Done, time.Minute)})
	require.Equal(t, 1, l.Count(reclaim.Pending))
	require.Equal(t, []string{"a-1"}, l.OpenOnUnit(rec("", "a", "", 0).Target.Key()))
	require.Empty(t, l.OpenOnUnit(rec("", "b", "", 0).Target.Key()), "an ended reclaim holds its unit no more")

	first := l.Sorted()
	require.Equal(t, []string{"b-1", "a-1"}, ids(first))
	require.Same(t, &first[0], &l.Sorted()[0], "shared while nothing changed")

	mu.Lock()
	l.Set(rec("a-1", "a", reclaim.Done, 0))
	l.Set(rec("a-2", "a", reclaim.Pending, 2*time.Minute))
	mu.Unlock()
	require.Equal(t, 1, l.Count(reclaim.Pending))
	require.Equal(t, 2, l.Count(reclaim.Done))
	require.Equal(t, []string{"a-1", "a-2"}, l.ByAlert("a"))
	require.Equal(t, []string{"a-2"}, l.OpenOnUnit(rec("", "a", "", 0).Target.Key()))
	require.Equal(t, []string{"a-2", "b-1", "a-1"}, ids(l.Sorted()))

	mu.Lock()
	l.Remove("a-2")
	mu.Unlock()
	require.Equal(t, []string{"a-1"}, l.ByAlert("a"))
	require.Empty(t, l.OpenOnUnit(rec("", "a", "", 0).Target.Key()))
	require.Zero(t, l.Count(reclaim.Pending))
}

func ids(rs []*reclaim.Reclaim) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// Queued writes go out in order; those queued while one is written go
// out together, each reclaim once, as the latest decided it. A change of
// a reclaim waits for its queued write, with the lock let go.
func TestQueuedWritesInOrder(t *testing.T) {
	var mu sync.Mutex
	st := &store{hold: make(chan struct{}), started: make(chan struct{}, 1)}
	l := newLedger(st, nil, &mu, nil)

	mu.Lock()
	w1 := l.Queue([]*reclaim.Reclaim{rec("a-1", "a", reclaim.Pending, 0)}, nil)
	mu.Unlock()
	<-st.started // the first write is under way, held
	mu.Lock()
	w2 := l.Queue([]*reclaim.Reclaim{rec("a-1", "a", reclaim.Snoozed, 0), rec("b-1", "b", reclaim.Pending, 0)}, nil)
	w3 := l.Queue([]*reclaim.Reclaim{rec("c-1", "c", reclaim.Pending, 0)}, nil)
	require.NotNil(t, l.Unwritten("c-1"))
	r, _ := l.Get("a-1")
	require.Equal(t, reclaim.Snoozed, r.State, "in the index at once")
	mu.Unlock()

	awaited := make(chan error, 1)
	go func() {
		mu.Lock()
		defer mu.Unlock()
		awaited <- l.AwaitWritten("c-1")
	}()
	close(st.hold)
	require.NoError(t, <-awaited)
	require.NoError(t, l.Await([]*ledger.Queued{w1, w2, w3}, nil, time.Now()))
	require.NoError(t, l.Flush())
	require.Equal(t, [][]string{{"a-1@pending"}, {"a-1@snoozed", "b-1@pending", "c-1@pending"}}, st.written())
	mu.Lock()
	require.Zero(t, l.UnwrittenCount())
	mu.Unlock()
}

// A write the replica may no longer make is refused before the store is
// asked; one another replica got in first to leaves the stored reclaim in
// the index.
func TestWriteNowRefusedAndConflicting(t *testing.T) {
	var mu sync.Mutex
	st := &store{}
	lost := errors.New("the Lease was lost")
	var refuse error
	l := newLedger(st, nil, &mu, func(o *ledger.Options) {
		o.MayWrite = func() error { return refuse }
		o.Token = func() int64 { return 7 }
	})
	mu.Lock()
	defer mu.Unlock()
	require.NoError(t, l.WriteNow(nil, rec("a-1", "a", reclaim.Pending, 0)))
	r, _ := l.Get("a-1")
	require.Equal(t, int64(7), r.Fence, "written with the fencing token")

	refuse = lost
	require.ErrorIs(t, l.WriteNow(nil, rec("a-1", "a", reclaim.Done, 0)), lost)
	r, _ = l.Get("a-1")
	require.Equal(t, reclaim.Pending, r.State, "not in the index: not written")
	require.Len(t, st.written(), 1)

	refuse = nil
	stored := rec("a-1", "a", reclaim.Snoozed, 0)
	st.refuse = &reclaim.ConflictError{Stored: stored, Cause: errors.New("409")}
	var conflict *reclaim.ConflictError
	require.ErrorAs(t, l.WriteNow(nil, rec("a-1", "a", reclaim.Done, 0)), &conflict)
	r, _ = l.Get("a-1")
	require.Equal(t, reclaim.Snoozed, r.State, "what the store holds")
}

// A notification whose writes outlast AnswerWithin is journaled and
// answered; its entry is retired once the writes are done.
func TestAwaitJournalsASlowWrite(t *testing.T) {
	var mu sync.Mutex
	st := &store{hold: make(chan struct{})}
	j := &journal{entries: map[string][]byte{}}
	l := newLedger(st, j, &mu, func(o *ledger.Options) { o.AnswerWithin = 10 * time.Millisecond })
	mu.Lock()
	w := l.Queue([]*reclaim.Reclaim{rec("a-1", "a", reclaim.Pending, 0)}, nil)
	mu.Unlock()
	n := &notification.Notification{Version: "4", Alerts: []notification.Alert{{Status: "firing", StartsAt: t0}}}
	require.NoError(t, l.Await([]*ledger.Queued{w}, n, time.Now()))
	require.Equal(t, 1, j.left(), "journaled, not yet written")
	close(st.hold)
	require.NoError(t, l.Flush())
	require.Zero(t, j.left(), "retired once written")
}
