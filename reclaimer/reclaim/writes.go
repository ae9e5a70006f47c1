package reclaim

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// A notification's decisions are in the index at once and written to the
// store in the background, one notification after another: a
// notification of 10,000 alerts is answered while a kubernetes store still
// writes them. Nothing is warned, acted on or changed by a command before
// its decision is written.

// pendingWrite is one notification's decisions on their way to the store.
type pendingWrite struct {
	rs     []*Reclaim
	events []Event
	done   chan struct{} // closed once written, or given up
	err    error         // why it was given up; set before done closes

	mu      sync.Mutex
	lastErr error // the last failed attempt's error, while it is retried
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
func (e *Engine) queueWrite(rs []*Reclaim, events []Event) *pendingWrite {
	w := &pendingWrite{rs: rs, events: events, done: make(chan struct{})}
	now := e.now()
	for _, r := range rs {
		r.Updated = now
		if e.o.Leadership != nil {
			r.Fence = e.o.Leadership.Token()
		}
		e.set(r)
		e.unwritten[r.ID] = w
	}
	e.queue = append(e.queue, w)
	if !e.writing {
		e.writing = true
		go e.writeQueued()
	}
	return w
}

// writeQueued writes the queued notifications in order, then ends.
func (e *Engine) writeQueued() {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			e.writing = false
			e.mu.Unlock()
			return
		}
		w := e.queue[0]
		e.mu.Unlock()

		err := e.writeOut(w)

		e.mu.Lock()
		e.queue = e.queue[1:]
		for _, r := range w.rs {
			if e.unwritten[r.ID] == w {
				delete(e.unwritten, r.ID)
			}
		}
		e.o.Metrics.unwritten.Set(float64(len(e.unwritten)))
		e.mu.Unlock()
		w.err = err
		close(w.done)
		if err == nil {
			e.o.Failpoint("ingested")
		}
		e.Kick()
	}
}

// writeOut writes one notification's decisions, retrying while the store
// fails and this replica leads.
func (e *Engine) writeOut(w *pendingWrite) error {
	wait := firstWriteRetry
	for {
		if err := e.fenced(FencedWrite); err != nil {
			return err
		}
		err := e.o.Store.Write(w.rs, w.events)
		if err == nil {
			return nil
		}
		e.o.Metrics.Error(ComponentStore)
		if cs := conflicts(err); len(cs) > 0 || errors.Is(err, ErrNotLeader) {
			// Another replica leads, or wrote some of them first: what the
			// store holds is what was done.
			e.mu.Lock()
			for _, c := range cs {
				e.set(c.Stored)
			}
			e.version++
			e.mu.Unlock()
			e.o.Logger.Warn("a notification's decisions were refused by the store: another replica leads", "reclaims", len(w.rs), "err", err)
			return err
		}
		e.o.Logger.Error("writing a notification's decisions failed: retrying; none is carried out before it is written",
			"reclaims", len(w.rs), "first", w.rs[0].ID, "retry_in", wait, "err", err)
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
		time.Sleep(wait)
		wait = min(2*wait, lastWriteRetry)
	}
}

// await waits for the writes of a notification: until all are written, or
// until webhook.answer_within after it arrived (0: until written). Then
// the answer is yes if none failed so far: the rest are still being written.
func (e *Engine) await(ws []*pendingWrite, arrived time.Time) error {
	var timeout <-chan time.Time
	if d := time.Duration(e.o.Config.Webhook.AnswerWithin); d > 0 {
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
		case <-timeout:
			for _, w := range ws {
				if err := w.failing(); err != nil {
					return fmt.Errorf("%w: %v", ErrStillWriting, err)
				}
			}
			return nil
		}
	}
	return nil
}

// awaitWritten waits until the reclaim's decisions are in the store; the
// caller holds e.mu, which is let go while waiting.
func (e *Engine) awaitWritten(id string) error {
	deadline := time.NewTimer(writeWait)
	defer deadline.Stop()
	for {
		w := e.unwritten[id]
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
	e.mu.Lock()
	ws := append([]*pendingWrite(nil), e.queue...)
	e.mu.Unlock()
	var errs []error
	for _, w := range ws {
		<-w.done
		errs = append(errs, w.err)
	}
	return errors.Join(errs...)
}
