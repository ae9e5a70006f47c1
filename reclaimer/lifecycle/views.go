package lifecycle

import (
	"sort"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/ledger"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// List returns every reclaim, newest first. The reclaims are shared with
// the engine and other readers: read them, never change them.
func (e *Engine) List() []*reclaim.Reclaim { return e.ledger.Sorted() }

// Query selects a page of reclaims.
type Query struct {
	// States keeps these states only; none keeps all.
	States map[reclaim.State]bool
	// Limit bounds the page; 0 means no bound.
	Limit int
	// After is the last ID of the previous page.
	After string
}

// Page is one page of reclaims, newest first.
type Page struct {
	Reclaims []*reclaim.Reclaim
	// Next is the After of the next page; empty on the last.
	Next string
}

// Page returns a page of reclaims, shared as List's are.
func (e *Engine) Page(q Query) Page {
	all := e.List()
	start := 0
	if q.After != "" {
		e.mu.Lock()
		last, ok := e.ledger.Get(q.After)
		e.mu.Unlock()
		if ok {
			start = sort.Search(len(all), func(i int) bool { return ledger.Newer(last, all[i]) })
		}
	}
	var p Page
	for _, r := range all[start:] {
		if len(q.States) > 0 && !q.States[r.State] {
			continue
		}
		if q.Limit > 0 && len(p.Reclaims) == q.Limit {
			p.Next = p.Reclaims[len(p.Reclaims)-1].ID
			break
		}
		p.Reclaims = append(p.Reclaims, r)
	}
	return p
}

// Get returns a copy of one reclaim.
func (e *Engine) Get(id string) (*reclaim.Reclaim, bool) {
	r := e.snapshot(id)
	return r, r != nil
}

// Audit returns the newest audit events.
func (e *Engine) Audit(limit int) ([]reclaim.Event, error) { return e.o.Store.Audit(limit) }

// Prune forgets reclaims that ended before the given time. The store
// deletes them without the engine's lock: nothing writes a reclaim that
// ended and was told, and notifications go on meanwhile.
func (e *Engine) Prune(before time.Time) (int, error) {
	if err := e.fenced(reclaim.FencedWrite); err != nil {
		return 0, err
	}
	n, err := e.o.Store.Prune(before)
	if err != nil {
		return n, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, r := range e.ledger.All() {
		if r.EndedBefore(before) {
			e.ledger.Remove(id)
		}
	}
	return n, nil
}
