package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// The prune job deletes a reclaim once it ended longer ago than the
// retention, not before.
func TestPruneJob(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	f.clock.Set(reclaimtest.T0.Add(3 * time.Minute))
	f.ingest(reclaimtest.IdlePod("resolved", reclaimtest.T0, "ml", "nb-0"))
	f.at(3 * time.Minute) // the owner is told it is off: then it has ended
	require.Equal(t, reclaim.Cancelled, f.only().State)
	job := f.eng.PruneJob(24 * time.Hour)
	require.Equal(t, time.Hour, job.Every)
	require.NoError(t, job.Run(context.Background(), reclaimtest.T0.Add(24*time.Hour)))
	require.Len(t, f.eng.List(), 1, "ended 23h57m before")
	require.NoError(t, job.Run(context.Background(), reclaimtest.T0.Add(25*time.Hour)))
	require.Empty(t, f.eng.List())
}

// Run starts the jobs with the term, at once, and ends with it.
func TestRunStartsTheJobs(t *testing.T) {
	f := newFixture(t, "")
	ran := make(chan time.Time, 1)
	job := lifecycle.Job{Name: "test", Every: time.Hour, Run: func(_ context.Context, now time.Time) error {
		select {
		case ran <- now:
		default:
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		f.eng.Run(ctx, time.Hour, job)
		close(done)
	}()
	require.Equal(t, f.clock.Now(), <-ran, "at the term's start, on the engine's clock")
	cancel()
	<-done
}
