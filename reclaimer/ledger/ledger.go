// Package ledger is the reclaims the lifecycle holds in memory, and their
// way to the store: each reclaim by id, the indexes a notification is
// decided by, the count per state and the sorted view readers share (this
// file); the write of one decision, and the writes of a notification's
// decisions behind its answer, with the journal that makes an early
// answer durable and its replay at the start (writes.go, journal.go).
//
// A ledger changes under its owner's lock only (Options.Lock), and a
// record in it never changes: a write puts a new copy.
package ledger

import (
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Options are what a ledger writes to and reports through. Store, Lock
// and Clock are required.
type Options struct {
	Store reclaim.Store
	// Journal, when set, records a notification answered before its
	// decisions are all written and gives it back at the next start.
	Journal reclaim.Journal
	// Lock is the owner's: the ledger changes under it, the writer takes
	// it to finish a write, and AwaitWritten lets go of it while it waits.
	Lock sync.Locker
	// MayWrite is asked before every write to the store and the journal:
	// nil, or why this replica must not write (it may have lost the
	// Lease). Nil always writes.
	MayWrite func() error
	// Token is the fencing token every written record carries; nil writes
	// none.
	Token func() int64
	Clock func() time.Time
	// AnswerWithin is how long Await waits for a notification's writes
	// before it journals the notification instead; 0 waits for the writes.
	AnswerWithin time.Duration
	// Written is called once a batch of writes is done (the owner's
	// wake-up); StoreFailed after each request the store or the journal
	// failed; Unwritten with the number of reclaims not yet written.
	Written     func()
	StoreFailed func()
	Unwritten   func(n int)
	// Failpoint, when set, is called at the named points ("ingested",
	// "journaled"); the crash tests kill the process there.
	Failpoint func(name string)
	Logger    *slog.Logger
}

// Ledger is the reclaims in memory and their writes under way.
type Ledger struct {
	o Options

	index map[string]*reclaim.Reclaim
	// Kept with the index by Set and Remove, so that a notification costs
	// what its alerts do, not what the store holds.
	byAlert  map[string][]string            // reclaim ids by alert fingerprint
	openUnit map[reclaim.TargetKey][]string // ids of the reclaims not ended, by unit
	counts   map[reclaim.State]int
	version  uint64 // counts the index's changes

	// Decisions in the index not yet in the store: the latest write of
	// each reclaim, the writes in order, and whether one runs.
	unwritten map[string]*Queued
	queue     []*Queued
	writing   bool

	// deciding counts the notifications answered from the journal and not
	// yet decided (journal.go); decideTurn lets one at a time be decided,
	// and holds the next before it is journaled: a flood of large
	// notifications waits rather than piling up in memory.
	deciding   sync.WaitGroup
	decideTurn chan struct{}

	// The sorted view, rebuilt when the index has changed, outside the
	// owner's lock: a status page over 60,000 reclaims does not hold up a
	// webhook.
	viewMu      sync.Mutex
	view        []*reclaim.Reclaim
	viewVersion uint64
}

// New is a ledger of the reclaims rs, as the store loaded them.
func New(o Options, rs []*reclaim.Reclaim) *Ledger {
	if o.MayWrite == nil {
		o.MayWrite = func() error { return nil }
	}
	for _, f := range []*func(){&o.Written, &o.StoreFailed} {
		if *f == nil {
			*f = func() {}
		}
	}
	if o.Unwritten == nil {
		o.Unwritten = func(int) {}
	}
	if o.Failpoint == nil {
		o.Failpoint = func(string) {}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{o: o, index: make(map[string]*reclaim.Reclaim, len(rs)), byAlert: map[string][]string{}, openUnit: map[reclaim.TargetKey][]string{},
		counts: map[reclaim.State]int{}, unwritten: map[string]*Queued{}, decideTurn: make(chan struct{}, 1)}
	for _, r := range rs {
		l.Set(r)
	}
	return l
}

// Set puts a reclaim into the index and the indexes kept with it.
func (l *Ledger) Set(r *reclaim.Reclaim) {
	l.Remove(r.ID)
	l.index[r.ID] = r
	l.counts[r.State]++
	add(l.byAlert, r.Fingerprint, r.ID)
	if !r.State.Terminal() {
		add(l.openUnit, r.Target.Key(), r.ID)
	}
	l.version++
}

// Remove takes a reclaim out of the index.
func (l *Ledger) Remove(id string) {
	old, ok := l.index[id]
	if !ok {
		return
	}
	delete(l.index, id)
	l.counts[old.State]--
	drop(l.byAlert, old.Fingerprint, id)
	drop(l.openUnit, old.Target.Key(), id)
	l.version++
}

// Get is the reclaim of an id, shared: read it, never change it.
func (l *Ledger) Get(id string) (*reclaim.Reclaim, bool) {
	r, ok := l.index[id]
	return r, ok
}

// All is every reclaim by id, shared as Get's are.
func (l *Ledger) All() iter.Seq2[string, *reclaim.Reclaim] { return maps.All(l.index) }

// ByAlert is the ids of an alert's reclaims, one an episode, shared: read
// the list, never change it.
func (l *Ledger) ByAlert(fingerprint string) []string { return l.byAlert[fingerprint] }

// OpenOnUnit is the ids of the reclaims not ended of a unit and holder,
// shared as ByAlert's are.
func (l *Ledger) OpenOnUnit(k reclaim.TargetKey) []string { return l.openUnit[k] }

// Count is how many reclaims are in a state.
func (l *Ledger) Count(s reclaim.State) int { return l.counts[s] }

// Sorted is every reclaim, newest first (Newer), shared with the owner
// and other readers. It takes the owner's lock, briefly: the sort runs
// outside it, once for each change of the index.
func (l *Ledger) Sorted() []*reclaim.Reclaim {
	l.viewMu.Lock()
	defer l.viewMu.Unlock()
	l.o.Lock.Lock()
	if l.view != nil && l.viewVersion == l.version {
		v := l.view
		l.o.Lock.Unlock()
		return v
	}
	ver := l.version
	out := make([]*reclaim.Reclaim, 0, len(l.index))
	for _, r := range l.index {
		out = append(out, r)
	}
	l.o.Lock.Unlock()
	sort.Slice(out, func(i, j int) bool { return Newer(out[i], out[j]) })
	l.view, l.viewVersion = out, ver
	return out
}

// Newer orders reclaims newest first, then by ID.
func Newer(a, b *reclaim.Reclaim) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	return a.ID < b.ID
}

// add and drop keep short lists: an alert has a reclaim an episode, a
// unit one open reclaim.
func add[K comparable](m map[K][]string, k K, id string) { m[k] = append(m[k], id) }

func drop[K comparable](m map[K][]string, k K, id string) {
	ids := slices.DeleteFunc(m[k], func(x string) bool { return x == id })
	if len(ids) == 0 {
		delete(m, k)
		return
	}
	m[k] = ids
}
