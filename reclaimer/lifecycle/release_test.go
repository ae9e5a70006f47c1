package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// suspendedJob is a fixture whose Job batch/train is stopped at reclaimtest.T0+5m,
// with a verifier that decides what the world shows.
func suspendedJob(t *testing.T, cfg string) *fixture {
	f := newFixture(t, cfg)
	f.verifier = &reclaimtest.Verifier{}
	f.restart()
	f.inspector.Controllers = map[string]reclaim.TopOwner{
		"batch/train-0": {APIVersion: "batch/v1", Kind: "Job", Namespace: "batch", Name: "train", Stop: reclaim.StopPatch, Stopped: "suspended"},
	}
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "batch", "train-0"))
	f.at(0)
	return f
}

// A stop is done only once the world shows the GPU released: until then
// the reclaim stays acting, and the time it took is recorded.
func TestDoneOnlyOnceReleased(t *testing.T) {
	f := suspendedJob(t, "release: {interval: 10s}\n")
	f.verifier.Set(true, false, "held by pod batch/train-0 (Running, terminating)")
	f.at(5 * time.Minute)
	r := f.only()
	require.Equal(t, reclaim.Acting, r.State, "carried out, not released yet")
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute), r.ActedAt)
	require.Equal(t, reclaimtest.T0.Add(10*time.Minute), r.ReleaseBy, "a Job's deadline: the default 5m")
	require.Contains(t, r.Reason, "terminating")
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds(), "nothing said before the world changed")

	// Looks at 1s, 2s, 4s, 8s after the action, then every release.interval.
	f.at(5*time.Minute + 500*time.Millisecond)
	require.Equal(t, 1, f.verifier.ReleaseLooks, "the next look waits a second")
	for _, s := range []time.Duration{1, 2, 4, 8, 16, 26} {
		f.at(5*time.Minute + s*time.Second)
	}
	require.Equal(t, 7, f.verifier.ReleaseLooks, "then as long as it has been, up to release.interval: at 0, 1s, 2s, 4s, 8s, 16s, 26s")
	f.verifier.Set(false, false, "")
	f.at(5*time.Minute + 35*time.Second)
	require.Equal(t, 7, f.verifier.ReleaseLooks, "no look before release.interval")
	f.at(5*time.Minute + 36*time.Second)
	r = f.only()
	require.Equal(t, reclaim.Done, r.State)
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute+36*time.Second), r.ReleasedAt)
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute), r.ActedAt, "acted_at is the action's time, not the release's")
	require.Equal(t, "did stop", r.Detail, "what the action did")
	require.Equal(t, "did stop; the GPU was seen released 36s after the action", r.Reason)
	require.Equal(t, []string{"stop batch/train-0"}, f.actor.Calls, "looking is not acting again")
	f.at(6 * time.Minute)
	require.Equal(t, reclaim.MsgReclaimed, f.notifier.Kinds()[len(f.notifier.Kinds())-1])
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_reclaimed_gpus_total"))
}

// A holder idle on a GPU its other holders keep busy (the rules' holder
// signal): the warning says stopping it frees its share, the final message
// says the GPU stays held, and no GPU is counted as reclaimed.
func TestOnlyAShareFreed(t *testing.T) {
	f := newFixture(t, "release: {interval: 10s}\n")
	f.verifier = &reclaimtest.Verifier{}
	f.restart()
	f.inspector.Controllers = map[string]reclaim.TopOwner{
		"web/serve-b": {APIVersion: "apps/v1", Kind: "Deployment", Namespace: "web", Name: "serve-b", Stop: reclaim.StopScale, Replicas: 1, Stopped: "scaled down"},
	}
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "web", "serve-b", "signal", "holder_sm_utilization"))
	f.at(0)
	require.Contains(t, f.notifier.Text(reclaim.MsgWarning), "Its other holders keep the GPU busy: stopping it frees its share, not the GPU.")
	f.at(5 * time.Minute)
	f.at(6 * time.Minute)
	r := f.only()
	require.Equal(t, reclaim.Done, r.State, r.Reason)
	require.Equal(t, "its other holders, busy with their own work when it was warned", r.SharedWith)
	require.Contains(t, r.Reason, "its share was seen freed")
	require.Contains(t, f.notifier.Text(reclaim.MsgReclaimed), "Its share is freed; the GPU stays held: its other holders")
	require.Equal(t, 0.0, f.metric("gpureclaim_reclaimer_reclaimed_gpus_total"), "a share is no GPU freed")
}

// A controller that refuses or ignores the stop: at the deadline the
// reclaim ends not released with what the controller said; the owner and
// the admins hear it; the alert still firing is not a duplicate.
func TestNotReleasedAtTheDeadline(t *testing.T) {
	f := suspendedJob(t, "release: {timeouts: {Job: 2m}}\n")
	why := "held by pod batch/train-0 (Running); Kubernetes reports on Job batch/train: event FailedSuspend: refused"
	f.verifier.Set(true, false, why)
	f.at(5 * time.Minute)
	f.at(6 * time.Minute)
	require.Equal(t, reclaim.Acting, f.only().State)
	f.at(7 * time.Minute)
	r := f.only()
	require.Equal(t, reclaim.NotReleased, r.State)
	require.Contains(t, r.Reason, "did stop, but")
	require.Contains(t, r.Reason, "2m0s later the GPU is still held: "+why)
	require.True(t, r.ReleasedAt.IsZero())
	f.at(7*time.Minute + time.Second)
	kinds := f.notifier.Kinds()
	require.Equal(t, reclaim.MsgNotReleased, kinds[len(kinds)-1])
	require.Contains(t, f.notifier.Sent[len(f.notifier.Sent)-1].Text, "was not released")
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_actions_total", "action", "stop", "result", "not_released"))
	require.Equal(t, 0.0, f.metric("gpureclaim_reclaimer_actions_total", "action", "stop", "result", "done"), "one result per action: not done as well")
	require.Equal(t, 0.0, f.metric("gpureclaim_reclaimer_reclaimed_gpus_total"), "nothing was freed")
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_reclaims", "state", "not_released"))

	res := f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "batch", "train-0"))
	require.Zero(t, res.Duplicate, "the alert firing on is not a repeat of a reclaim that freed the GPU")
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_decisions_total", "decision", "not_released"))
	require.Equal(t, 1, f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0.Add(20*time.Minute), "batch", "train-0")).New, "a new episode starts a new reclaim")
}

// A look that fails is not a release: it counts an error and, past the
// deadline, ends not released saying the reclaimer could not tell.
func TestReleaseLookFails(t *testing.T) {
	f := suspendedJob(t, "")
	f.verifier.Err = context.DeadlineExceeded
	f.at(5 * time.Minute)
	require.Equal(t, reclaim.Acting, f.only().State)
	f.at(11 * time.Minute)
	require.Equal(t, reclaim.NotReleased, f.only().State)
	require.Contains(t, f.only().Reason, "cannot tell whether it is released")
	require.Equal(t, 2.0, f.metric("gpureclaim_reclaimer_errors_total", "component", "release"))
}

// A restart while waiting for the release does not act again: it looks.
func TestRestartWhileReleasingLooksAgain(t *testing.T) {
	f := suspendedJob(t, "")
	f.verifier.Set(true, false, "held")
	f.at(5 * time.Minute)
	f.restart()
	f.verifier.Set(false, false, "")
	f.at(6 * time.Minute)
	require.Equal(t, reclaim.Done, f.only().State)
	require.Equal(t, []string{"stop batch/train-0"}, f.actor.Calls)
}

// A restore is restored once the workload runs again; one that does not
// run by its deadline ends with the reason, told to the owner.
func TestRestoreIsSeenRunning(t *testing.T) {
	f := suspendedJob(t, "")
	f.at(5 * time.Minute)
	require.Equal(t, reclaim.Done, f.only().State)
	f.at(5*time.Minute + time.Second) // the owner is told
	id := f.only().ID

	f.verifier.Set(false, true, "no pod of Job batch/train runs")
	r, err := f.eng.Restore(context.Background(), id, "alice")
	require.NoError(t, err)
	require.True(t, r.Restore.RestoredAt.IsZero(), "asked, not yet running")
	require.Equal(t, "alice", r.Restore.AskedBy)
	f.verifier.Set(false, false, "")
	f.at(6 * time.Minute)
	r = f.only()
	require.Equal(t, reclaimtest.T0.Add(6*time.Minute), r.Restore.RestoredAt)
	require.Equal(t, reclaim.MsgRestored, f.notifier.Sent[len(f.notifier.Sent)-1].Kind)
	require.Contains(t, f.notifier.Sent[len(f.notifier.Sent)-1].Text, "it runs again")

	g := suspendedJob(t, "")
	g.at(5 * time.Minute)
	g.at(5*time.Minute + time.Second)
	g.verifier.Set(false, true, "no pod of Job batch/train runs; Kubernetes reports on Job batch/train: Suspended (JobSuspended)")
	_, err = g.eng.Restore(context.Background(), g.only().ID, "alice")
	require.NoError(t, err)
	g.at(11 * time.Minute)
	r = g.only()
	require.True(t, r.Restore.RestoredAt.IsZero())
	require.Contains(t, r.Restore.Failed, "Job batch/train was asked to run again 5m59s ago and does not: no pod of Job batch/train runs")
	require.Equal(t, reclaim.MsgRestoreFailed, g.notifier.Sent[len(g.notifier.Sent)-1].Kind)
	_, err = g.eng.Restore(context.Background(), g.only().ID, "bob")
	require.NoError(t, err)
	require.Equal(t, 1, count(g.actor.Calls, "restore batch/train-0"), "one restore per reclaim")
}

// Restore pressed from several places at once calls the controller once.
func TestOneRestoreWhatever(t *testing.T) {
	f := suspendedJob(t, "")
	f.at(5 * time.Minute)
	id := f.only().ID
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := f.eng.Restore(context.Background(), id, "someone")
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.Equal(t, []string{"stop batch/train-0", "restore batch/train-0"}, f.actor.Calls)
}

// A stop that did not release the GPU is taken back by default: no
// controller carries it out later with nobody told, and the owner hears
// the workload was left running. There is nothing left to restore.
func TestNotReleasedTakesTheStopBack(t *testing.T) {
	f := suspendedJob(t, "release: {timeouts: {Job: 2m}}\n")
	f.verifier.Set(true, false, "held by pod batch/train-0 (Running)")
	f.at(5 * time.Minute)
	f.at(7 * time.Minute)
	r := f.only()
	require.Equal(t, reclaim.NotReleased, r.State)
	require.Equal(t, []string{"stop batch/train-0", "restore batch/train-0"}, f.actor.Calls, "the stop is taken back")
	require.False(t, r.StopInPlace)
	require.Contains(t, r.Reason, "the stop was taken back (Job batch/train resumed) and the workload left running")
	f.at(7*time.Minute + time.Second)
	require.Contains(t, f.notifier.Text(reclaim.MsgNotReleased), "left running")
	_, err := f.eng.Restore(context.Background(), r.ID, "alice")
	require.ErrorIs(t, err, reclaim.ErrNotRestorable)

	// Taking it back fails: the stop stays in place, the message says so,
	// and a restore takes it back later.
	g := suspendedJob(t, "release: {timeouts: {Job: 2m}}\n")
	g.verifier.Set(true, false, "held by pod batch/train-0 (Running)")
	g.actor.RestoreErr = errors.New("the apiserver is away")
	g.at(5 * time.Minute)
	g.at(7 * time.Minute)
	r = g.only()
	require.Equal(t, reclaim.NotReleased, r.State)
	require.True(t, r.StopInPlace)
	require.Contains(t, r.Reason, "taking the stop back failed, so it stays in place (restoring takes it back): the apiserver is away")
	g.actor.RestoreErr = nil
	_, err = g.eng.Restore(context.Background(), r.ID, "alice")
	require.NoError(t, err)
	r = g.only()
	require.False(t, r.StopInPlace)
	require.False(t, r.Restore.RestoredAt.IsZero(), "its pods never stopped: it runs")
}

// release.on_not_released: keep leaves the stop written and says so; the
// engine follows it, and when the controller carries it out later the
// reclaim is done at that time and the owner is told. Restore works from
// not_released.
func TestNotReleasedKeptIsFollowed(t *testing.T) {
	f := suspendedJob(t, "release: {timeouts: {Job: 2m}, interval: 10s, on_not_released: keep}\n")
	f.verifier.Set(true, false, "held by pod batch/train-0 (Running); KubeRay is down")
	f.at(5 * time.Minute)
	f.at(7 * time.Minute)
	r := f.only()
	require.Equal(t, reclaim.NotReleased, r.State)
	require.True(t, r.StopInPlace)
	require.Equal(t, []string{"stop batch/train-0"}, f.actor.Calls, "kept: not taken back")
	require.Contains(t, r.Reason, "the stop of Job batch/train stays in place (release.on_not_released: keep)")
	f.at(7*time.Minute + time.Second)
	require.Contains(t, f.notifier.Text(reclaim.MsgNotReleased), "stays in place")

	looks := f.verifier.ReleaseLooks
	f.at(7*time.Minute + 5*time.Second)
	require.Greater(t, f.verifier.ReleaseLooks, looks, "followed")
	f.at(7*time.Minute + 8*time.Second)
	require.Equal(t, reclaim.NotReleased, f.only().State)

	// The controller comes back and carries the stop out.
	f.verifier.Set(false, false, "")
	f.at(9 * time.Minute)
	r = f.only()
	require.Equal(t, reclaim.Done, r.State)
	require.Equal(t, reclaimtest.T0.Add(9*time.Minute), r.ReleasedAt, "the true time")
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute), r.ActedAt)
	require.Contains(t, r.Reason, "carried the stop out late: the GPU was seen released 4m0s after the action")
	f.at(9*time.Minute + time.Second)
	kinds := f.notifier.Kinds()
	require.Equal(t, reclaim.MsgReclaimed, kinds[len(kinds)-1], "the owner is told")
	require.Contains(t, f.notifier.Sent[len(f.notifier.Sent)-1].Text, "carried the stop out late")
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_reclaimed_gpus_total"))
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_actions_total", "action", "stop", "result", "not_released"), "counted once, at its first end")
	require.Equal(t, 0.0, f.metric("gpureclaim_reclaimer_actions_total", "action", "stop", "result", "done"))
	require.True(t, f.only().Restorable())

	// Kept and restored before the controller came back.
	g := suspendedJob(t, "release: {timeouts: {Job: 2m}, on_not_released: keep}\n")
	g.verifier.Set(true, false, "held")
	g.at(5 * time.Minute)
	g.at(7 * time.Minute)
	g.at(7*time.Minute + time.Second)
	_, err := g.eng.Restore(context.Background(), g.only().ID, "alice")
	require.NoError(t, err)
	r = g.only()
	require.Equal(t, reclaim.NotReleased, r.State)
	require.False(t, r.StopInPlace, "taken back")
	require.Equal(t, []string{"stop batch/train-0", "restore batch/train-0"}, g.actor.Calls)
	g.verifier.Set(false, false, "")
	g.at(10 * time.Minute)
	require.Equal(t, reclaim.NotReleased, g.only().State, "no longer followed once restored")
}
