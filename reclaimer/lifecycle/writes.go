package lifecycle

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
// together in the next. The answer
// waits for the write; on a store with a Journal (both have one) it waits
// at most webhook.answer_within, then records the notification, as it
// came, in the journal and answers: 10,000 alerts on kubernetes are
// answered while their reclaims are still written, and a replica that
// stops before the end is replayed from the journal by the next. A
// notification of more than JournalFirst alerts goes into the journal
// before it is decided (ingest.go). Either way a 200 means the
// notification is durable.
// Nothing is warned, acted on or changed by a command before its decision
// is written.

// pendingWrite is one notification's decisions on their way to the store.
type pendingWrite struct {
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

func (w *pendingWrite) failing() error {
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

// queueWrite puts decisions in the index and queues their write; the
// caller holds e.mu.
func (e *Engine) queueWrite(rs []*reclaim.Reclaim, events []reclaim.Event) *pendingWrite {
	w := &pendingWrite{rs: rs, events: events, done: make(chan struct{}), failed: make(chan struct{})}
	now := e.now()
	for _, r := range rs {
		r.Updated = now
		if e.o.Leadership != nil {
			r.Fence = e.o.Leadership.Token()
		}
		e.ledger.set(r)
		e.ledger.unwritten[r.ID] = w
	}
	e.ledger.queue = append(e.ledger.queue, w)
	if !e.ledger.writing {
		e.ledger.writing = true
		go e.writeQueued()
	}
	return w
}

// writeQueued writes the queued notifications, then ends. The
// notifications queued while one is written go out together, in one write
// of their latest records: a thousand one-alert notifications (Alertmanager
// grouping by unit) share the store's writers as one of a thousand would.
func (e *Engine) writeQueued() {
	for {
		e.mu.Lock()
		if len(e.ledger.queue) == 0 {
			e.ledger.writing = false
			e.mu.Unlock()
			return
		}
		n, size := 0, 0
		for n < len(e.ledger.queue) && (n == 0 || size+len(e.ledger.queue[n].rs) <= writeBatch) {
			size += len(e.ledger.queue[n].rs)
			n++
		}
		batch := slices.Clone(e.ledger.queue[:n])
		e.mu.Unlock()

		err := e.writeOut(batch)

		e.mu.Lock()
		clear(e.ledger.queue[:n]) // their reclaims and events can go once written
		e.ledger.queue = e.ledger.queue[n:]
		for _, w := range batch {
			for _, r := range w.rs {
				if e.ledger.unwritten[r.ID] == w {
					delete(e.ledger.unwritten, r.ID)
				}
			}
		}
		e.o.Metrics.unwritten.Set(float64(len(e.ledger.unwritten)))
		e.mu.Unlock()
		var entries []string
		for _, w := range batch {
			w.err = err
			w.mu.Lock()
			w.written = err == nil
			entries = append(entries, w.entries...)
			w.mu.Unlock()
		}
		if err == nil {
			e.o.Failpoint("ingested")
			e.retire(entries...) // before done: Flush means retired too
		}
		for _, w := range batch {
			close(w.done)
		}
		e.Kick()
	}
}

// writeBatch is the most reclaims the notifications queued behind one
// another are written with at once; a larger notification goes alone.
const writeBatch = decidePart

// merged is what a batch of notifications writes: each reclaim once, as
// the latest of them decided it, and every audit event in order.
func merged(batch []*pendingWrite) ([]*reclaim.Reclaim, []reclaim.Event) {
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
// store fails and this replica leads.
func (e *Engine) writeOut(batch []*pendingWrite) error {
	rs, events := merged(batch)
	wait := firstWriteRetry
	for {
		if err := e.fenced(reclaim.FencedWrite); err != nil {
			return err
		}
		err := e.o.Store.Write(rs, events)
		if err == nil {
			return nil
		}
		e.o.Metrics.Error(reclaim.ComponentStore)
		if cs := conflicts(err); len(cs) > 0 || errors.Is(err, reclaim.ErrNotLeader) {
			// Another replica leads, or wrote some of them first: what the
			// store holds is what was done.
			e.mu.Lock()
			for _, c := range cs {
				e.ledger.set(c.Stored)
			}
			e.ledger.version++
			e.mu.Unlock()
			e.o.Logger.Warn("a notification's decisions were refused by the store: another replica leads", "reclaims", len(rs), "err", err)
			return err
		}
		e.o.Logger.Error("writing a notification's decisions failed: retrying; none is carried out before it is written",
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

// await waits for the writes of a notification. On a store with a
// journal it waits until webhook.answer_within after the notification
// arrived (0: until written); then, if nothing failed so far, it records
// the alerts in the journal and answers: the rest are still being written.
func (e *Engine) await(ws []*pendingWrite, n *notification.Notification, arrived time.Time) error {
	j := e.o.Journal
	var timeout <-chan time.Time
	if d := time.Duration(e.o.Config.Webhook.AnswerWithin); j != nil && d > 0 && len(ws) > 0 {
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
			body, err := n.Body()
			if err != nil {
				return fmt.Errorf("encoding the notification for the journal: %w", err)
			}
			id, err := j.Journal(body)
			if err != nil {
				e.o.Metrics.Error(reclaim.ComponentStore)
				return fmt.Errorf("recording the notification in the journal: %w", err)
			}
			e.o.Failpoint("journaled")
			e.retireWhenWritten(ws, id)
			return nil
		}
	}
	return nil
}

// retire deletes journal entries whose decisions are written; one left
// behind is replayed, deciding nothing new.
func (e *Engine) retire(ids ...string) {
	j := e.o.Journal
	if j == nil {
		return
	}
	for _, id := range ids {
		if err := j.Retire(id); err != nil {
			e.o.Metrics.Error(reclaim.ComponentStore)
			e.o.Logger.Warn("retiring a journal entry failed: the next start replays it, to no effect", "entry", id, "err", err)
		}
	}
}

// replay decides the notifications in the store's journal again, at start:
// those a replica answered and stopped before writing all of. The caller
// holds e.mu or has not shared the engine yet.
func (e *Engine) replay() error {
	j := e.o.Journal
	if j == nil {
		return nil
	}
	entries, err := j.Replay()
	if err != nil {
		return fmt.Errorf("reading the journal: %w", err)
	}
	for _, entry := range entries {
		n, err := notification.Decode(entry.Notification)
		if err != nil {
			return fmt.Errorf("journal entry %s: %w", entry.ID, err)
		}
		res, ws := e.ingest(n.Alerts)
		e.o.Logger.Info("replayed a notification from the journal", "entry", entry.ID, "alerts", len(n.Alerts), "new", res.New)
		e.retireWhenWritten(ws, entry.ID)
	}
	return nil
}

// retireWhenWritten retires a journal entry once the last of ws (written
// after the others) is written: at once if there is none or its writer has
// already finished, else by the writer when it does.
func (e *Engine) retireWhenWritten(ws []*pendingWrite, id string) {
	if len(ws) == 0 {
		e.retire(id)
		return
	}
	w := ws[len(ws)-1]
	w.mu.Lock()
	written := w.written
	if !written {
		w.entries = append(w.entries, id)
	}
	w.mu.Unlock()
	if written {
		e.retire(id)
	}
}

// awaitWritten waits until the reclaim's decisions are in the store; the
// caller holds e.mu, which is let go while waiting.
func (e *Engine) awaitWritten(id string) error {
	deadline := time.NewTimer(writeWait)
	defer deadline.Stop()
	for {
		w := e.ledger.unwritten[id]
		if w == nil {
			return nil
		}
		e.mu.Unlock()
		select {
		case <-w.done:
			e.mu.Lock()
		case <-deadline.C:
			e.mu.Lock()
			return fmt.Errorf("reclaim %s: %w", id, ErrStillWriting)
		}
	}
}

// writeWait bounds how long a change to a reclaim waits for its decision
// to be written.
const writeWait = 30 * time.Second

// Flush waits until every decision taken so far is in the store.
func (e *Engine) Flush() error {
	e.deciding.Wait()
	e.mu.Lock()
	ws := append([]*pendingWrite(nil), e.ledger.queue...)
	e.mu.Unlock()
	var errs []error
	for _, w := range ws {
		<-w.done
		errs = append(errs, w.err)
	}
	return errors.Join(errs...)
}
