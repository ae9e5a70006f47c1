package ledger

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// A notification's decisions are in the index at once and written to the
// store in the background, in order; those queued behind one write go out
// together in the next. The answer waits for the write; on a store with
// a Journal (both have one) it waits at most AnswerWithin, then records
// the notification, as it came, in the journal and answers: 10,000 alerts
// on kubernetes are answered while their reclaims are still written, and
// a replica that stops before the end is replayed from the journal by the
// next. A notification of more than JournalFirst alerts goes into the
// journal before it is decided (journal.go). Either way a 200 means the
// notification is durable. Nothing is warned, acted on or changed by a
// command before its decision is written: a later write of a reclaim
// waits for the queued one (AwaitWritten).

// Queued is one notification's decisions on their way to the store.
type Queued struct {
	rs     []*reclaim.Reclaim
	events []reclaim.Event
	done   chan struct{} // closed once written, or given up
	err    error         // why it was given up; set before done closes

	failed chan struct{} // closed when an attempt first fails

	mu      sync.Mutex
	lastErr error    // the last failed attempt's error, while it is retried
	entries []string // journal entries to retire once written
	written bool
}

func (w *Queued) failing() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// Waits between attempts at a write the store refused.
const (
	firstWriteRetry = time.Second
	lastWriteRetry  = 30 * time.Second
)

// ErrStillWriting says the store has not yet taken a notification's
// decisions; they are being retried.
var ErrStillWriting = errors.New("the store has not taken the notification yet; still trying")

// stamp marks records with the time and the fencing token they are
// written with.
func (l *Ledger) stamp(rs []*reclaim.Reclaim) {
	now := l.o.Clock()
	for _, r := range rs {
		r.Updated = now
		if l.o.Token != nil {
			r.Fence = l.o.Token()
		}
	}
}

// WriteNow writes reclaims and audit events to the store and, once they
// are written, puts the reclaims in the index; the caller holds the lock.
// A write another replica got in first to puts what the store holds in
// the index instead.
func (l *Ledger) WriteNow(events []reclaim.Event, rs ...*reclaim.Reclaim) error {
	if err := l.o.MayWrite(); err != nil {
		return err
	}
	l.stamp(rs)
	if err := l.o.Store.Write(rs, events); err != nil {
		l.o.StoreFailed()
		if cs := conflicts(err); len(cs) > 0 {
			// Another replica wrote them (a leader that lost the Lease, before
			// the fence): what the store holds is what was done.
			for _, c := range cs {
				l.Set(c.Stored)
				l.o.Logger.Warn("a reclaim was written by another replica: going on from the store", "reclaim", c.Stored.ID, "state", c.Stored.State)
			}
			return err
		}
		l.o.Logger.Error("writing to the store failed: nothing is done until it is written", "reclaims", len(rs), "first", rs[0].ID, "err", err)
		return err
	}
	for _, r := range rs {
		l.Set(r)
	}
	return nil
}

// conflicts lists the ConflictErrors in err, joined ones included.
func conflicts(err error) []*reclaim.ConflictError {
	switch u := err.(type) {
	case *reclaim.ConflictError:
		return []*reclaim.ConflictError{u}
	case interface{ Unwrap() []error }:
		var out []*reclaim.ConflictError
		for _, e := range u.Unwrap() {
			out = append(out, conflicts(e)...)
		}
		return out
	case interface{ Unwrap() error }:
		return conflicts(u.Unwrap())
	}
	return nil
}

// Queue puts decisions in the index and queues their write; the caller
// holds the lock.
func (l *Ledger) Queue(rs []*reclaim.Reclaim, events []reclaim.Event) *Queued {
	w := &Queued{rs: rs, events: events, done: make(chan struct{}), failed: make(chan struct{})}
	l.stamp(rs)
	for _, r := range rs {
		l.Set(r)
		l.unwritten[r.ID] = w
	}
	l.queue = append(l.queue, w)
	if !l.writing {
		l.writing = true
		go l.writeQueued()
	}
	return w
}

// Unwritten is the queued write of a reclaim not yet in the store, or
// nil; the caller holds the lock.
func (l *Ledger) Unwritten(id string) *Queued { return l.unwritten[id] }

// UnwrittenCount is how many reclaims are not yet in the store; the
// caller holds the lock.
func (l *Ledger) UnwrittenCount() int { return len(l.unwritten) }

// writeQueued writes the queued notifications, then ends. The
// notifications queued while one is written go out together, in one write
// of their latest records: a thousand one-alert notifications (Alertmanager
// grouping by unit) share the store's writers as one of a thousand would.
func (l *Ledger) writeQueued() {
	for {
		l.o.Lock.Lock()
		if len(l.queue) == 0 {
			l.writing = false
			l.o.Lock.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(l.queue) && (n == 0 || size+len(l.queue[n].rs) <= writeBatch) {
			size += len(l.queue[n].rs)
			n++
		}
		batch := slices.Clone(l.queue[:n])
		l.o.Lock.Unlock()

		err := l.writeOut(batch)

		l.o.Lock.Lock()
		clear(l.queue[:n]) // their reclaims and events can go once written
		l.queue = l.queue[n:]
		for _, w := range batch {
			for _, r := range w.rs {
				if l.unwritten[r.ID] == w {
					delete(l.unwritten, r.ID)
				}
			}
		}
		l.o.Unwritten(len(l.unwritten))
		l.o.Lock.Unlock()
		var entries []string
		for _, w := range batch {
			w.err = err
			w.mu.Lock()
			w.written = err == nil
			entries = append(entries, w.entries...)
			w.mu.Unlock()
		}
		if err == nil {
			l.o.Failpoint("ingested")
			l.retire(entries...) // before done: Flush means retired too
		}
		for _, w := range batch {
			close(w.done)
		}
		l.o.Written()
	}
}

// writeBatch is the most reclaims the notifications queued behind one
// another are written with at once; a larger notification goes alone.
const writeBatch = decidePart

// merged is what a batch of notifications writes: each reclaim once, as
// the latest of them decided it, and every audit event in order.
func merged(batch []*Queued) ([]*reclaim.Reclaim, []reclaim.Event) {
	if len(batch) == 1 {
		return batch[0].rs, batch[0].events
	}
	at := map[string]int{}
	var rs []*reclaim.Reclaim
	var events []reclaim.Event
	for _, w := range batch {
		for _, r := range w.rs {
			if i, ok := at[r.ID]; ok {
				rs[i] = r
				continue
			}
			at[r.ID] = len(rs)
			rs = append(rs, r)
		}
		events = append(events, w.events...)
	}
	return rs, events
}

// writeOut writes a batch of notifications' decisions, retrying while the
// store fails and this replica may write.
func (l *Ledger) writeOut(batch []*Queued) error {
	rs, events := merged(batch)
	wait := firstWriteRetry
	for {
		if err := l.o.MayWrite(); err != nil {
			return err
		}
		err := l.o.Store.Write(rs, events)
		if err == nil {
			return nil
		}
		l.o.StoreFailed()
		if cs := conflicts(err); len(cs) > 0 || errors.Is(err, reclaim.ErrNotLeader) {
			// Another replica leads, or wrote some of them first: what the
			// store holds is what was done.
			l.o.Lock.Lock()
			for _, c := range cs {
				l.Set(c.Stored)
			}
			l.o.Lock.Unlock()
			l.o.Logger.Warn("a notification's decisions were refused by the store: another replica leads", "reclaims", len(rs), "err", err)
			return err
		}
		l.o.Logger.Error("writing a notification's decisions failed: retrying; none is carried out before it is written",
			"reclaims", len(rs), "notifications", len(batch), "first", rs[0].ID, "retry_in", wait, "err", err)
		for _, w := range batch {
			w.mu.Lock()
			if w.lastErr == nil {
				close(w.failed)
			}
			w.lastErr = err
			w.mu.Unlock()
		}
		time.Sleep(wait)
		wait = min(2*wait, lastWriteRetry)
	}
}

// Await waits for the writes of a notification. With a journal it waits
// until AnswerWithin after the notification arrived (0: until written);
// then, if nothing failed so far, it records the notification in the
// journal and answers: the rest are still being written.
func (l *Ledger) Await(ws []*Queued, n *notification.Notification, arrived time.Time) error {
	var timeout <-chan time.Time
	if d := l.o.AnswerWithin; l.o.Journal != nil && d > 0 && len(ws) > 0 {
		t := time.NewTimer(max(0, time.Until(arrived.Add(d))))
		defer t.Stop()
		timeout = t.C
	}
	for _, w := range ws {
		select {
		case <-w.done:
			if w.err != nil {
				return w.err
			}
		case <-w.failed:
			return fmt.Errorf("%w: %v", ErrStillWriting, w.failing())
		case <-timeout:
			for _, w := range ws {
				if err := w.failing(); err != nil {
					return fmt.Errorf("%w: %v", ErrStillWriting, err)
				}
			}
			id, err := l.journal(n)
			if err != nil {
				return err
			}
			l.retireWhenWritten(ws, id)
			return nil
		}
	}
	return nil
}

// AwaitWritten waits until a reclaim's decisions are in the store; the
// caller holds the lock, which is let go while waiting.
func (l *Ledger) AwaitWritten(id string) error {
	deadline := time.NewTimer(writeWait)
	defer deadline.Stop()
	for {
		w := l.unwritten[id]
		if w == nil {
			return nil
		}
		l.o.Lock.Unlock()
		select {
		case <-w.done:
			l.o.Lock.Lock()
		case <-deadline.C:
			l.o.Lock.Lock()
			return fmt.Errorf("reclaim %s: %w", id, ErrStillWriting)
		}
	}
}

// writeWait bounds how long a change to a reclaim waits for its decision
// to be written.
const writeWait = 30 * time.Second

// Flush waits until every decision taken so far is in the store, those of
// the notifications being decided from the journal included.
func (l *Ledger) Flush() error {
	l.deciding.Wait()
	l.o.Lock.Lock()
	ws := append([]*Queued(nil), l.queue...)
	l.o.Lock.Unlock()
	var errs []error
	for _, w := range ws {
		<-w.done
		errs = append(errs, w.err)
	}
	return errors.Join(errs...)
}
