package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// carriedOut records an action its target accepted at the time at: the
// reclaim stays acting until the world shows the GPU released, or the
// deadline of what was stopped passes.
func (e *Engine) carriedOut(ctx context.Context, id string, res *reclaim.Result, at time.Time, gone bool) {
	r, err := e.update(id, func(c *reclaim.Reclaim) []reclaim.Event {
		return []reclaim.Event{e.event(c, "carried_out", res.Detail, "reclaimer")}
	}, func(c *reclaim.Reclaim) bool {
		if c.State != reclaim.Acting {
			return false
		}
		c.Stopped, c.Killed, c.Detail = res.Stopped, res.Killed, res.Detail
		c.ActedAt, c.TargetGone = at, gone
		c.ActingSince, c.NextTry = time.Time{}, time.Time{}
		c.ReleaseBy = c.ActedAt.Add(e.o.Config.Release.TimeoutFor(c.ReleaseKind()))
		c.Reason = "carried out; waiting for the GPU to be released"
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording an action carried out", "reclaim", id, "err", err)
		return
	}
	if r.State == reclaim.Acting && !r.ReleaseBy.IsZero() {
		e.verify(ctx, r)
	}
}

// verify looks whether the action's target let go of the GPU (decide):
// released, the reclaim is done; past the deadline, it ends not released
// with what the controller said; in between it looks again.
func (e *Engine) verify(ctx context.Context, r *reclaim.Reclaim) {
	v := e.verdict(ctx, r)
	seen := e.now() // when the world was seen, not when the look began
	switch v.Do {
	case DoDone:
		result := reclaim.ActionDone
		if r.TargetGone {
			result = reclaim.ActionGone
		}
		took := e.countRelease(r, seen, v.Shared)
		e.o.Metrics.idleToAction.Observe(max(0, r.ActedAt.Sub(r.IdleSince()).Seconds()))
		why := r.Detail
		switch {
		case v.Shared != "":
			why = fmt.Sprintf("%s; its share was seen freed %s after the action, and the GPU stays held: %s", r.Detail, took.Round(time.Second), v.Shared)
		case e.o.Verifier != nil:
			why = fmt.Sprintf("%s; the GPU was seen released %s after the action", r.Detail, took.Round(time.Second))
		}
		v.Why = why
		// One result per action, counted once the write that ends it succeeds.
		if _, applied, err := e.apply(r.ID, v); err != nil {
			e.o.Logger.Error("recording a release", "reclaim", r.ID, "err", err)
		} else if applied {
			e.o.Metrics.action(r.Action, result)
		}
	case DoWait:
		if _, _, err := e.apply(r.ID, v); err != nil {
			e.o.Logger.Error("recording a look at the release", "reclaim", r.ID, "err", err)
		}
	case DoNotReleased:
		e.notReleased(ctx, r, v.Why)
	}
}

// notReleased ends an action whose GPU was not seen released by its
// deadline. A stop left written is carried out whenever its controller
// comes back, with nobody told; so it is taken back (release.on_not_released:
// undo) and the owner hears the workload was left running, or kept and
// followed (keep), and the message says which.
func (e *Engine) notReleased(ctx context.Context, r *reclaim.Reclaim, why string) {
	inPlace := r.Stopped != nil && !r.DryRun
	if inPlace {
		rs := e.o.Restorer
		switch {
		case rs == nil:
			why += fmt.Sprintf("; the stop of %s stays in place", r.Stopped)
		case e.o.Config.Release.OnNotReleased == config.NotReleasedKeep:
			why += fmt.Sprintf("; the stop of %s stays in place (release.on_not_released: keep): the workload stops if its controller carries it out, and restoring takes it back", r.Stopped)
		default:
			if err := e.fenced(reclaim.FencedAction); err != nil {
				e.o.Logger.Warn("not taking a stop back", "reclaim", r.ID, "err", err)
				return // the next leader looks again
			}
			if err := rs.Restore(ctx, r); err != nil {
				e.o.Metrics.Error(reclaim.ComponentKubernetes)
				why += fmt.Sprintf("; taking the stop back failed, so it stays in place (restoring takes it back): %v", err)
			} else {
				inPlace = false
				why += fmt.Sprintf("; the stop was taken back (%s) and the workload left running", r.Stopped.RestoredText())
			}
		}
	}
	if _, applied, err := e.apply(r.ID, Verdict{Do: DoNotReleased, Why: why, StopInPlace: inPlace}); err != nil {
		e.o.Logger.Error("recording a GPU not released", "reclaim", r.ID, "err", err)
	} else if applied {
		e.o.Metrics.action(r.Action, reclaim.ActionNotReleased)
	}
}

// follow looks again at a stop left in place after not_released: once its
// controller carries it out, the reclaim is done at the time the GPU was
// seen released, and the owner is told again.
func (e *Engine) follow(ctx context.Context, r *reclaim.Reclaim) {
	rel := e.look(ctx, r, false)
	seen := e.now()
	interval := time.Duration(e.o.Config.Release.Interval)
	following := func(c *reclaim.Reclaim) bool {
		return c.State == reclaim.NotReleased && c.StopInPlace && c.Restore == nil
	}
	if !rel.Done {
		if _, err := e.update(r.ID, nil, func(c *reclaim.Reclaim) bool {
			if !following(c) {
				return false
			}
			c.NextTry = seen.Add(interval)
			return true
		}); err != nil {
			e.o.Logger.Error("recording a look at a stop left in place", "reclaim", r.ID, "err", err)
		}
		return
	}
	took := max(0, seen.Sub(r.ActedAt))
	late := fmt.Sprintf("its controller carried the stop out late: the GPU was seen released %s after the action", took.Round(time.Second))
	done, err := e.update(r.ID, func(c *reclaim.Reclaim) []reclaim.Event {
		return []reclaim.Event{e.event(c, string(reclaim.Done), late, "reclaimer")}
	}, func(c *reclaim.Reclaim) bool {
		if !following(c) {
			return false
		}
		c.State, c.ReleasedAt, c.Closed, c.NextTry, c.SharedWith = reclaim.Done, seen, seen, time.Time{}, rel.Shared
		c.Reason, c.Detail = late, c.Detail+"; "+late
		c.Final = reclaim.Delivery{} // the owner hears the new end
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a stop carried out late", "reclaim", r.ID, "err", err)
		return
	}
	if done.State == reclaim.Done {
		e.countRelease(r, seen, rel.Shared)
	}
	e.o.Logger.Info("reclaim done late", "reclaim", r.ID, "reason", late)
}

// countRelease counts an action's target seen released at seen, and says
// how long after the action that was. A share freed frees no GPU, and is
// not counted as reclaimed.
func (e *Engine) countRelease(r *reclaim.Reclaim, seen time.Time, shared string) time.Duration {
	took := max(0, seen.Sub(r.ActedAt))
	e.o.Metrics.releaseDuration.WithLabelValues(r.ReleaseKind()).Observe(took.Seconds())
	if shared == "" {
		idle := max(0, r.ActedAt.Sub(r.IdleSince()).Seconds())
		e.o.Metrics.reclaimedGPUs.Add(r.Target.Size())
		e.o.Metrics.reclaimedIdle.Add(r.Target.Size() * idle)
	}
	return took
}

// look asks the world whether the GPU is released (or, for a restore,
// whether the workload runs again). Without a Verifier every action is
// taken at its word; a look that fails is no release.
func (e *Engine) look(ctx context.Context, r *reclaim.Reclaim, restore bool) reclaim.Release {
	v := e.o.Verifier
	if v == nil {
		return reclaim.Release{Done: true}
	}
	ask, what := v.Released, "it is released"
	if restore {
		ask, what = v.Running, "it runs"
	}
	rel, err := ask(ctx, r)
	if err != nil {
		e.o.Metrics.Error(reclaim.ComponentRelease)
		return reclaim.Release{Why: "cannot tell whether " + what + ": " + err.Error()}
	}
	return rel
}

// nextLook is how long to wait before looking at the world again: as long
// as it has been since the action (1s, 2s, 4s, ...), at least a second and
// at most interval, so a quick stop is seen quickly and a slow one is not
// asked about every second.
func nextLook(since, interval time.Duration) time.Duration {
	return min(interval, max(time.Second, since))
}

// verifyRestore looks whether a restored workload runs again.
func (e *Engine) verifyRestore(ctx context.Context, r *reclaim.Reclaim) {
	now := e.now()
	run := e.look(ctx, r, true)
	var kind reclaim.MessageKind
	r, err := e.update(r.ID, func(c *reclaim.Reclaim) []reclaim.Event {
		switch {
		case run.Done:
			return []reclaim.Event{e.event(c, "restored", c.Stopped.RestoredText(), c.Restore.AskedBy)}
		case !now.Before(c.Restore.Deadline):
			return []reclaim.Event{e.event(c, "restore_failed", c.Restore.Failed, c.Restore.AskedBy)}
		}
		return nil
	}, func(c *reclaim.Reclaim) bool {
		rs := c.Restore
		if !rs.Pending() {
			return false
		}
		switch {
		case run.Done:
			rs.RestoredAt, c.NextTry, kind = now, time.Time{}, reclaim.MsgRestored
		case now.Before(rs.Deadline):
			c.NextTry = now.Add(nextLook(now.Sub(rs.AskedAt), time.Duration(e.o.Config.Release.Interval)))
		default:
			c.NextTry, kind = time.Time{}, reclaim.MsgRestoreFailed
			rs.Failed = fmt.Sprintf("%s was asked to run again %s ago and does not: %s", c.Stopped, now.Sub(rs.AskedAt).Round(time.Second), run.Why)
		}
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a look at a restore", "reclaim", r.ID, "err", err)
		return
	}
	switch kind {
	case reclaim.MsgRestored:
		by := r.Restore.AskedBy
		e.send(ctx, reclaim.Message{Kind: reclaim.MsgRestored, Reclaim: r, By: by, Text: fmt.Sprintf("%s by %s; it runs again.", r.Stopped.RestoredText(), by)}, nil)
		if e.o.Events != nil {
			e.kubeEvent(ctx, r, "GPUReclaimRestored", fmt.Sprintf("%s by %s", r.Stopped.RestoredText(), by))
		}
	case reclaim.MsgRestoreFailed:
		why := r.Restore.Failed
		e.o.Logger.Warn("restore failed", "reclaim", r.ID, "reason", why)
		e.send(ctx, reclaim.Message{Kind: reclaim.MsgRestoreFailed, Reclaim: r, By: r.Restore.AskedBy, Text: "Restore failed: " + why + "."}, nil)
		if e.o.Events != nil {
			e.kubeEvent(ctx, r, "GPUReclaimRestoreFailed", why)
		}
	}
}
