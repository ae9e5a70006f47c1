package ledger

import (
	"fmt"
	"slices"

	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
)

// JournalFirst is the size of notification that is put in the store's
// journal and answered before it is decided: deciding 20,000 alerts takes
// about as long as webhook.answer_within's second.
const JournalFirst = 20000

// decidePart is how many alerts of a journaled notification are decided
// under the owner's lock at once: what one part holds while it is decided
// and written (its maps, its audit events) is a twentieth of what 100,000
// alerts would, and a webhook or a read waits for one part, not all.
const decidePart = 5000

// Decide decides alerts and queues their writes: the owner's ingest. It
// says how many new reclaims it made, and the writes to wait for.
type Decide func(alerts []notification.Alert) (created int, queued []*Queued)

// JournalThenDecide puts a notification in the journal, then decides it
// in the background, decidePart alerts at a time (decide takes the lock),
// one notification at a time, and retires the entry once its decisions
// are written. A replica that stops, or may no longer write, before then
// leaves the entry to the next start or leader. The caller has a journal.
func (l *Ledger) JournalThenDecide(n *notification.Notification, decide Decide) error {
	l.decideTurn <- struct{}{}
	id, err := l.journal(n)
	if err != nil {
		<-l.decideTurn
		return err
	}
	l.deciding.Add(1)
	alerts := n.Alerts // not n: its body (46 MB for 100,000 alerts) can go
	go func() {
		defer func() { <-l.decideTurn; l.deciding.Done() }()
		// Newest episode first across the whole notification, as ingest
		// orders one part; each part then finds the parts before it in
		// the index, and is decided as if they came in one.
		slices.SortStableFunc(alerts, NewestFirst)
		created := 0
		var ws []*Queued
		for part := range slices.Chunk(alerts, decidePart) {
			if err := l.o.MayWrite(); err != nil {
				// What was decided is written or refused; the entry stays,
				// and the next leader decides the rest.
				l.o.Logger.Warn("a journaled notification is left to the next leader", "entry", id, "decided", created, "err", err)
				return
			}
			c, w := decide(part)
			created += c
			ws = append(ws, w...)
		}
		l.o.Logger.Info("decided a notification answered from the journal", "entry", id, "alerts", len(alerts), "new", created)
		l.retireWhenWritten(ws, id)
	}()
	return nil
}

// journal puts a notification, as it came, in the journal.
func (l *Ledger) journal(n *notification.Notification) (string, error) {
	body, err := n.Body()
	if err != nil {
		return "", fmt.Errorf("encoding the notification for the journal: %w", err)
	}
	id, err := l.o.Journal.Journal(body)
	if err != nil {
		l.o.StoreFailed()
		return "", fmt.Errorf("recording the notification in the journal: %w", err)
	}
	l.o.Failpoint("journaled")
	return id, nil
}

// NewestFirst orders alerts by the start of their episode, the newest
// first.
func NewestFirst(a, b notification.Alert) int { return b.StartsAt.Compare(a.StartsAt) }

// Replay decides the notifications in the journal again, at the start:
// those a replica answered and stopped before writing all of. The caller
// holds the lock or has not shared the ledger yet.
func (l *Ledger) Replay(decide Decide) error {
	j := l.o.Journal
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
		created, ws := decide(n.Alerts)
		l.o.Logger.Info("replayed a notification from the journal", "entry", entry.ID, "alerts", len(n.Alerts), "new", created)
		l.retireWhenWritten(ws, entry.ID)
	}
	return nil
}

// retire deletes journal entries whose decisions are written; one left
// behind is replayed, deciding nothing new.
func (l *Ledger) retire(ids ...string) {
	j := l.o.Journal
	if j == nil {
		return
	}
	for _, id := range ids {
		if err := j.Retire(id); err != nil {
			l.o.StoreFailed()
			l.o.Logger.Warn("retiring a journal entry failed: the next start replays it, to no effect", "entry", id, "err", err)
		}
	}
}

// retireWhenWritten retires a journal entry once the last of ws (written
// after the others) is written: at once if there is none or its writer has
// already finished, else by the writer when it does.
func (l *Ledger) retireWhenWritten(ws []*Queued, id string) {
	if len(ws) == 0 {
		l.retire(id)
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
		l.retire(id)
	}
}
