// Package store keeps the reclaimer's state in an embedded bbolt database:
// one bucket of reclaims by id (each its public record, a GPUReclaim), one
// of audit events by time, and a journal of notifications answered before
// their reclaims were all written. Every write is one fsynced transaction.
package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var (
	bucketReclaims = []byte("reclaims")
	bucketAudit    = []byte("audit")
	bucketReplays  = []byte("replays")
	bucketJournal  = []byte("journal")
)

// Bolt is a reclaim.Store in a bbolt file.
type Bolt struct {
	db *bolt.DB
}

var (
	_ reclaim.Store   = (*Bolt)(nil)
	_ reclaim.Journal = (*Bolt)(nil)
)

// Open opens (or creates) the database. Only one process may hold it: a
// second one waits timeout, then fails.
func Open(path string, timeout time.Duration) (*Bolt, error) {
	// A large initial mmap (address space, not memory) spares a big write,
	// such as a notification of 10,000 alerts, the remaps that copy every
	// page of the transaction to the heap.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, InitialMmapSize: 1 << 30})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketReclaims, bucketAudit, bucketReplays, bucketJournal} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Bolt{db: db}, nil
}

func (b *Bolt) Close() error { return b.db.Close() }

func (b *Bolt) Load() ([]*reclaim.Reclaim, error) {
	var out []*reclaim.Reclaim
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReclaims).ForEach(func(k, v []byte) error {
			r, err := decode(v)
			if err != nil {
				return fmt.Errorf("reclaim %s: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

func (b *Bolt) Write(rs []*reclaim.Reclaim, events []reclaim.Event) error {
	// In key order: a B+tree takes sorted puts page by page, where random
	// ones split and rewrite pages all over (most of the time of a large
	// notification went there).
	rs = slices.SortedFunc(slices.Values(rs), func(a, b *reclaim.Reclaim) int { return strings.Compare(a.ID, b.ID) })
	// In transactions of about writeChunk: a notification of 100,000 alerts
	// holds a chunk's JSON and dirty pages at a time, not all of them. An
	// alert's reclaims share a transaction; a write cut short is retried
	// whole, and rewrites what it had written.
	for len(rs) > 0 || len(events) > 0 {
		n := chunkEnd(rs)
		m := 0
		if n < writeChunk {
			m = min(len(events), writeChunk-n)
		}
		if err := b.write(rs[:n], events[:m]); err != nil {
			return err
		}
		rs, events = rs[n:], events[m:]
	}
	return nil
}

// chunkEnd is how many of rs (sorted by id) the next transaction takes:
// writeChunk, or more to keep an alert's episodes together (a new one and
// the one it supersedes).
func chunkEnd(rs []*reclaim.Reclaim) int {
	n := min(len(rs), writeChunk)
	for n > 0 && n < len(rs) && rs[n].Fingerprint == rs[n-1].Fingerprint {
		n++
	}
	return n
}

// writeChunk bounds the reclaims and events of one transaction.
const writeChunk = 5000

func (b *Bolt) write(rs []*reclaim.Reclaim, events []reclaim.Event) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketReclaims)
		for _, r := range rs {
			v, err := json.Marshal(reclaim.ToAPI(r, nil))
			if err != nil {
				return err
			}
			if err := rb.Put([]byte(r.ID), v); err != nil {
				return err
			}
		}
		ab := tx.Bucket(bucketAudit)
		for _, e := range events {
			seq, err := ab.NextSequence()
			if err != nil {
				return err
			}
			v, err := json.Marshal(e)
			if err != nil {
				return err
			}
			if err := ab.Put(auditKey(e.Time, seq), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// decode reads a stored reclaim: its public record (v1alpha1.GPUReclaim).
func decode(v []byte) (*reclaim.Reclaim, error) {
	var g v1alpha1.GPUReclaim
	if err := json.Unmarshal(v, &g); err != nil {
		return nil, err
	}
	r, _, err := reclaim.FromAPI(&g)
	return r, err
}

// auditKey sorts events by time, then by the order they were written.
func auditKey(t time.Time, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, uint64(t.UnixNano()))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

func (b *Bolt) Audit(limit int) ([]reclaim.Event, error) {
	var out []reclaim.Event
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
			var e reclaim.Event
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Prune reads what has ended in one read transaction, reading of each
// reclaim only what says so, then deletes in transactions of pruneBatch:
// a notification's write waits for one batch, not for the whole prune.
func (b *Bolt) Prune(before time.Time) (int, error) {
	var drop [][]byte
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReclaims).ForEach(func(k, v []byte) error {
			r, err := decodeEnd(v)
			if err != nil {
				return fmt.Errorf("reclaim %s: %w", k, err)
			}
			if r.EndedBefore(before) {
				drop = append(drop, bytes.Clone(k))
			}
			return nil
		})
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for batch := range slices.Chunk(drop, pruneBatch) {
		err := b.db.Update(func(tx *bolt.Tx) error {
			rb := tx.Bucket(bucketReclaims)
			for _, k := range batch {
				if err := rb.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n += len(batch)
	}
	limit := auditKey(before, 0)
	for more := true; more; {
		err := b.db.Update(func(tx *bolt.Tx) error {
			c := tx.Bucket(bucketAudit).Cursor()
			k, _ := c.First()
			for i := 0; k != nil && bytes.Compare(k, limit) < 0; i++ {
				if i == pruneBatch {
					return nil
				}
				if err := c.Delete(); err != nil {
					return err
				}
				k, _ = c.First()
			}
			more = false
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// pruneBatch bounds the deletes of one transaction.
const pruneBatch = 1000

// decodeEnd reads of a stored reclaim only its state, when it closed and
// whether its final message went: what Prune asks.
func decodeEnd(v []byte) (*reclaim.Reclaim, error) {
	var g struct {
		Status struct {
			State  reclaim.State      `json:"state"`
			Closed *metav1.MicroTime  `json:"closed"`
			Final  *v1alpha1.Delivery `json:"final"`
		} `json:"status"`
	}
	if err := json.Unmarshal(v, &g); err != nil {
		return nil, err
	}
	r := &reclaim.Reclaim{State: g.Status.State}
	if g.Status.Closed != nil {
		r.Closed = g.Status.Closed.Time
	}
	if g.Status.Final != nil {
		r.Final.Sent = g.Status.Final.Sent
	}
	return r, nil
}

// Journal records a notification as one entry, keyed by a sequence so
// that replay keeps their order: one put, a fraction of the time its
// reclaims take to write when it has 100,000 alerts.
func (b *Bolt) Journal(notification []byte) (string, error) {
	var id uint64
	err := b.db.Update(func(tx *bolt.Tx) error {
		jb := tx.Bucket(bucketJournal)
		var err error
		if id, err = jb.NextSequence(); err != nil {
			return err
		}
		return jb.Put(journalKey(id), notification)
	})
	return strconv.FormatUint(id, 10), err
}

func (b *Bolt) Replay() ([]reclaim.Journaled, error) {
	var out []reclaim.Journaled
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).ForEach(func(k, v []byte) error {
			out = append(out, reclaim.Journaled{ID: strconv.FormatUint(binary.BigEndian.Uint64(k), 10), Notification: bytes.Clone(v)})
			return nil
		})
	})
	return out, err
}

func (b *Bolt) Retire(id string) error {
	seq, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return fmt.Errorf("journal entry %q: %w", id, err)
	}
	return b.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketJournal).Delete(journalKey(seq)) })
}

func journalKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// FirstSight records a key (a signed request's signature) until expires
// and says whether it is new; a key seen before and not expired is a
// replay. Expired keys are dropped in the same transaction, so the bucket
// holds only what is still valid, across restarts.
func (b *Bolt) FirstSight(key string, now, expires time.Time) (bool, error) {
	first := false
	err := b.db.Update(func(tx *bolt.Tx) error {
		rb := tx.Bucket(bucketReplays)
		var stale [][]byte
		if err := rb.ForEach(func(k, v []byte) error {
			if t, err := time.Parse(time.RFC3339Nano, string(v)); err != nil || !t.After(now) {
				stale = append(stale, append([]byte(nil), k...))
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range stale {
			if err := rb.Delete(k); err != nil {
				return err
			}
		}
		if rb.Get([]byte(key)) != nil {
			return nil
		}
		first = true
		return rb.Put([]byte(key), []byte(expires.UTC().Format(time.RFC3339Nano)))
	})
	return first, err
}
