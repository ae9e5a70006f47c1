package lifecycle

import (
	"context"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/loop"
)

// A Job is work the engine does on a schedule while it leads, beside the
// reclaims: pruning, restoring on demand, the weekly report. Run starts
// each with the term and stops it with the term, so a replica that does
// not lead runs none.
type Job struct {
	// Name names it in the logs.
	Name string
	// Every is how often it runs; the first run is at the term's start.
	Every time.Duration
	// Run does it once at now. An error is logged, and the job runs again
	// at its next time.
	Run func(ctx context.Context, now time.Time) error
}

// PruneJob deletes, every hour, the reclaims that ended more than
// retention ago.
func (e *Engine) PruneJob(retention time.Duration) Job {
	return Job{Name: "prune", Every: time.Hour, Run: func(_ context.Context, now time.Time) error {
		n, err := e.Prune(now.Add(-retention))
		if n > 0 {
			e.o.Logger.Info("pruned finished reclaims", "count", n)
		}
		return err
	}}
}

// RestoreJob asks, every interval, whether the stopped workloads whose
// policy has a restore_when are wanted again, and restores those that are.
func (e *Engine) RestoreJob(q DemandQuerier, every time.Duration) Job {
	return Job{Name: "restore on demand", Every: every, Run: func(ctx context.Context, _ time.Time) error {
		e.RestoreOnDemand(ctx, q)
		return nil
	}}
}

// runJobs starts the jobs for the term ctx lasts.
func (e *Engine) runJobs(ctx context.Context, jobs []Job) {
	for _, j := range jobs {
		go loop.Every(ctx, j.Every, func() {
			if err := j.Run(ctx, e.now()); err != nil && ctx.Err() == nil {
				e.o.Logger.Error("leader job failed", "job", j.Name, "err", err)
			}
		})
	}
}
