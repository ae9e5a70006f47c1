package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// recordingLock stands for the Lease: it counts the writes that reach it.
type recordingLock struct {
	resourcelock.Interface
	writes int
	last   resourcelock.LeaderElectionRecord
}

func (l *recordingLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	l.writes++
	return nil
}

func (l *recordingLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.writes++
	l.last = r
	return nil
}

func (l *recordingLock) Identity() string { return "a" }

// A replica paused past its renew deadline does not renew on waking: the
// renewal that would make the next leader wait a whole lease longer never
// reaches the Lease, and the replica knows it no longer leads.
func TestNoRenewalPastTheRenewDeadline(t *testing.T) {
	inner := &recordingLock{}
	l := newGuardedLock(inner, 10*time.Second)
	now := time.Duration(0)
	l.elapsed = func() time.Duration { return now }
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaderTransitions: 4}

	require.NoError(t, l.Create(context.Background(), mine))
	require.Equal(t, int64(5), l.Token())
	now = 8 * time.Second
	require.NoError(t, l.Update(context.Background(), mine), "renewed within the deadline")
	require.NoError(t, l.Check())
	require.Equal(t, 2, inner.writes)

	now += 30 * time.Second // paused (SIGSTOP) past the deadline
	require.ErrorContains(t, l.Update(context.Background(), mine), "not renewing")
	require.Equal(t, 2, inner.writes, "nothing written on waking")
	require.Error(t, l.Check(), "and it does not lead")

	theirs := resourcelock.LeaderElectionRecord{HolderIdentity: "b", LeaderTransitions: 5}
	require.NoError(t, l.Update(context.Background(), theirs), "a write that is not a renewal of its own term goes through")
	require.Equal(t, 3, inner.writes)
}

// A replica that stepped down and takes the Lease again, though it still
// names this replica (nobody took it meanwhile), starts a new term: its
// token grows, so that the fence refuses what the last term left in flight.
func TestATermAfterSteppingDownIsNew(t *testing.T) {
	inner := &recordingLock{}
	l := newGuardedLock(inner, 10*time.Second)
	now := time.Duration(0)
	l.elapsed = func() time.Duration { return now }
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaderTransitions: 4}
	require.NoError(t, l.Update(context.Background(), mine))
	require.Equal(t, int64(5), l.Token())

	now += 30 * time.Second
	require.Error(t, l.Update(context.Background(), mine), "no renewal past the deadline")
	l.stepDown()
	require.Error(t, l.Check(), "stepped down: it does not lead")
	require.NoError(t, l.Update(context.Background(), mine), "taken again")
	require.Equal(t, 5, inner.last.LeaderTransitions, "as a new term")
	require.Equal(t, int64(6), l.Token())
	require.NoError(t, l.Check())

	// Taken after another replica's term: that term counted already.
	l.stepDown()
	require.NoError(t, l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaderTransitions: 7}))
	require.Equal(t, 7, inner.last.LeaderTransitions)
	require.Equal(t, int64(8), l.Token())
}
