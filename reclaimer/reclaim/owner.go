package reclaim

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// ownerAction decides on a pod's top owner before the owner is warned: an
// action its controller would undo frees nothing, so a pod is evicted only
// when nothing owns it, a service is scaled, a job or notebook is stopped
// the way its controller expects, and under an owner the reclaimer cannot
// stop the owner is only told, and why. It returns nil when the decision
// must wait (the owner could not be looked up).
func (e *Engine) ownerAction(ctx context.Context, r *Reclaim) *Reclaim {
	if r.Target.Pod == "" || r.TopOwner != nil {
		return r
	}
	switch r.Action {
	case config.ActionEvict, config.ActionScaleDown, config.ActionStop:
	default:
		return r
	}
	p := e.policy(r)
	if p == nil {
		return r
	}
	ctl, err := e.o.Inspector.TopOwner(ctx, r.Target)
	if errors.Is(err, ErrGone) {
		return r // the action finds it gone
	}
	if err != nil {
		e.o.Metrics.Error(ComponentKubernetes)
		e.o.Logger.Warn("looking up the pod's top owner; the warning waits", "reclaim", r.ID, "err", err)
		_, uerr := e.update(r.ID, nil, func(c *Reclaim) bool {
			c.NextTry = e.now().Add(dependencyWait)
			c.Reason = "cannot look up what owns the pod yet: " + err.Error()
			return true
		})
		if uerr != nil {
			e.o.Logger.Error("recording a deferral", "reclaim", r.ID, "err", uerr)
		}
		return nil
	}
	action, why := decideOnOwner(p, r.Action, ctl, r.Target)
	c, err := e.update(r.ID, func(c *Reclaim) []Event {
		switch {
		case action == config.ActionNotify:
			return []Event{e.event(c, "decided", "notify: "+why, "policy")}
		case action != r.Action || ctl.Kind != "":
			return []Event{e.event(c, "decided", fmt.Sprintf("%s on the top owner, %s", action, ctl), "policy")}
		}
		return nil // a bare pod, evicted as decided
	}, func(c *Reclaim) bool {
		if c.State != Pending {
			return false
		}
		c.TopOwner = &ctl
		if action == config.ActionNotify {
			c.State, c.Closed, c.Final.Sent, c.Reason = Notified, e.now(), true, why
			return true
		}
		c.Action = action
		c.Reason = "warning the owner; " + c.ActionText() + " after the grace period"
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording the top owner's action", "reclaim", r.ID, "err", err)
		return nil
	}
	if c.State == Notified {
		e.o.Metrics.decide(DecisionNotify)
		e.o.Logger.Info("telling the owner only", "reclaim", r.ID, "pod", r.Target.Holder(), "top_owner", ctl.String(), "reason", why)
	}
	return c
}

// decideOnOwner turns the policy's action for a pod into what its top
// owner needs, or notify with the reason.
func decideOnOwner(p *config.Policy, action string, ctl TopOwner, t Target) (string, string) {
	auto := p.Action == config.ActionAuto
	switch {
	case ctl.Stop == StopNone:
		return config.ActionNotify, ctl.Why
	case ctl.Kind == "":
		if action == config.ActionScaleDown {
			return config.ActionNotify, fmt.Sprintf("pod %s/%s has no controller to scale down; the policy asks for scale_down, so the owner is told", t.Namespace, t.Pod)
		}
		return config.ActionEvict, ""
	case action == config.ActionEvict && !auto:
		return config.ActionNotify, fmt.Sprintf("%s runs the pod and would start another if it were evicted; the policy asks for evict, so the owner is told (use action stop or auto)", ctl)
	case ctl.Stop == StopScale:
		if auto && ctl.Replicas > 1 {
			return config.ActionNotify, fmt.Sprintf("one of %d replicas of %s: an eviction would be replaced and a scale-down would stop busy replicas too; telling the owner only", ctl.Replicas, ctl)
		}
		return config.ActionScaleDown, ""
	case action == config.ActionScaleDown && !auto:
		return config.ActionNotify, fmt.Sprintf("%s does not scale; the policy asks for scale_down, so the owner is told (use action stop or auto)", ctl)
	}
	return config.ActionStop, ""
}
