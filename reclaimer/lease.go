package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// guardedLock is the Lease lock, remembering when this replica last
// renewed the Lease (the moment it asked, on the monotonic clock) and the
// Lease's transitions at the time: its term's fencing token.
//
// A paused process (SIGSTOP, a long GC, a frozen VM) that wakes up has
// not renewed for as long as it slept: Check fails at once, before any
// goroutine acts on what it was doing, whatever client-go's elector has
// yet to notice. Another replica takes the Lease only leaseDuration after
// it last saw it renewed, on its own clock; renewDeadline is shorter by
// the margin that leaves for clock rates and the renewal's own latency.
type guardedLock struct {
	resourcelock.Interface
	valid time.Duration // renewDeadline

	start   time.Time
	elapsed func() time.Duration // since start, on the monotonic clock
	renewed atomic.Int64         // since start, when the last renewal was asked; -1: never
	token   atomic.Int64
	lease   atomic.Pointer[string] // namespace/name/uid, once leading
}

func newGuardedLock(lock resourcelock.Interface, renewDeadline time.Duration) *guardedLock {
	l := &guardedLock{Interface: lock, valid: renewDeadline, start: time.Now()}
	l.elapsed = func() time.Duration { return time.Since(l.start) }
	l.renewed.Store(-1)
	return l
}

func (l *guardedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	asked := l.elapsed()
	return l.held(r, asked, l.Interface.Create(ctx, r))
}

// Update renews or takes the Lease, but never renews a term past its renew
// deadline: a replica that wakes from a pause would otherwise write one
// more renewal before it notices, and make the next leader wait a whole
// lease longer for a replica that is about to stop.
func (l *guardedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	asked := l.elapsed()
	if r.HolderIdentity == l.Identity() {
		if l.renewed.Load() >= 0 {
			if err := l.Check(); err != nil {
				return fmt.Errorf("not renewing: %w", err)
			}
		} else if prev := l.token.Load(); prev > 0 && int64(r.LeaderTransitions)+1 == prev {
			// Taken again after stepping down, though the Lease still
			// names this replica: a new term, so that the last one's
			// writes still in flight are refused by the fence.
			r.LeaderTransitions++
		}
	}
	return l.held(r, asked, l.Interface.Update(ctx, r))
}

// stepDown ends this replica's term: Check fails until it takes the Lease
// again, under a new token.
func (l *guardedLock) stepDown() {
	l.renewed.Store(-1)
	l.lease.Store(nil)
}

func (l *guardedLock) held(r resourcelock.LeaderElectionRecord, asked time.Duration, err error) error {
	if err == nil && r.HolderIdentity == l.Identity() {
		l.token.Store(int64(r.LeaderTransitions) + 1)
		l.renewed.Store(int64(asked))
	}
	return err
}

// Check fails once the last renewal is older than the renew deadline.
func (l *guardedLock) Check() error {
	renewed := l.renewed.Load()
	if renewed < 0 {
		return fmt.Errorf("the Lease was never renewed by this replica")
	}
	if ago := l.elapsed() - time.Duration(renewed); ago >= l.valid {
		return fmt.Errorf("the Lease was last renewed %s ago, past the renew deadline (%s): another replica may hold it", ago.Round(time.Millisecond), l.valid)
	}
	return nil
}

// Token is this replica's term: the Lease's leaseTransitions when it took
// it, plus one (the first term is 1; 0 is no election).
func (l *guardedLock) Token() int64 { return l.token.Load() }

// Fence is what a kill carries to a node: the Lease, by its UID (a Lease
// made anew starts its terms again), and this replica's term of it.
func (l *guardedLock) Fence() (string, int64) {
	if p := l.lease.Load(); p != nil {
		return *p, l.Token()
	}
	return "", 0
}
