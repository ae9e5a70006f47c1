package lifecycle

import (
	"slices"
	"sync"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// ledger is the reclaims in memory: each by id, the indexes kept with
// it, the count per state, the writes on their way to the store
// (writes.go), and the sorted view readers share (views.go). It changes
// under the engine's lock only, and a record in it never changes: a write
// puts a new copy.
type ledger struct {
	index map[string]*reclaim.Reclaim
	// Kept with the index by set and remove, so that a notification costs
	// what its alerts do, not what the store holds.
	byAlert  map[string][]string            // reclaim ids by alert fingerprint
	openUnit map[reclaim.TargetKey][]string // ids of the reclaims not ended, by unit
	counts   map[reclaim.State]int
	version  uint64 // counts the index's changes

	// Decisions in the index not yet in the store: the latest write of
	// each reclaim, the writes in order, and whether one runs.
	unwritten map[string]*pendingWrite
	queue     []*pendingWrite
	writing   bool

	// The sorted view, rebuilt when the index has changed, outside the
	// engine's lock: a status page over 60,000 reclaims does not hold up
	// a webhook.
	viewMu      sync.Mutex
	view        []*reclaim.Reclaim
	viewVersion uint64
}

func newLedger(size int) ledger {
	return ledger{index: make(map[string]*reclaim.Reclaim, size), byAlert: map[string][]string{}, openUnit: map[reclaim.TargetKey][]string{},
		counts: map[reclaim.State]int{}, unwritten: map[string]*pendingWrite{}}
}

// set puts a reclaim into the index and the indexes kept with it.
func (l *ledger) set(r *reclaim.Reclaim) {
	l.remove(r.ID)
	l.index[r.ID] = r
	l.counts[r.State]++
	add(l.byAlert, r.Fingerprint, r.ID)
	if !r.State.Terminal() {
		add(l.openUnit, r.Target.Key(), r.ID)
	}
}

// remove takes a reclaim out of the index.
func (l *ledger) remove(id string) {
	old, ok := l.index[id]
	if !ok {
		return
	}
	delete(l.index, id)
	l.counts[old.State]--
	drop(l.byAlert, old.Fingerprint, id)
	drop(l.openUnit, old.Target.Key(), id)
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
