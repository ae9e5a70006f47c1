package reclaim

import (
	"time"
)

// Store keeps reclaims and the audit log durably. Writes are durable when
// they return: the engine writes a decision before it carries it out. A shared store for a highly available pair implements the same.
type Store interface {
	// Load returns every reclaim, for the engine's index at start.
	Load() ([]*Reclaim, error)
	// Write stores reclaims and appends audit events, durably when it
	// returns nil. A large write may be split (an alert's reclaims kept
	// together); one that fails is retried whole.
	Write(rs []*Reclaim, events []Event) error
	// Audit returns the newest events first, at most limit.
	Audit(limit int) ([]Event, error)
	// Prune deletes terminal reclaims and events older than before.
	Prune(before time.Time) (int, error)
	Close() error
}

// Journal is a store's log of notifications answered before all their
// decisions were written (a kubernetes store writes a reclaim per request;
// bbolt takes seconds for 100,000). A store without one is waited for: its
// answer comes when the decisions are written.
type Journal interface {
	// Journal durably records a notification, its body as it came, and
	// names the entry.
	Journal(notification []byte) (string, error)
	// Replay returns the entries not yet retired, oldest first.
	Replay() ([]Journaled, error)
	// Retire deletes an entry whose decisions are all written.
	Retire(id string) error
}

// Journaled is a notification in the journal.
type Journaled struct {
	ID           string
	Notification []byte
}

// Event is one line of the audit trail.
type Event struct {
	Time    time.Time `json:"time"`
	Reclaim string    `json:"reclaim"`
	Kind    string    `json:"kind"`
	Target  string    `json:"target"`
	Detail  string    `json:"detail,omitempty"`
	Actor   string    `json:"actor,omitempty"`
}
