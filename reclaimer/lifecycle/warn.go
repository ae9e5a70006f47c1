package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// A Delivery's refs hold, per notifier, the references its messages
// returned (a Slack channel and timestamp, to update the message later) and
// a mark for each kind of message it delivered, so that a retry skips the
// notifiers that already have it. Keys are "<notifier>.<ref>" and
// "<notifier>.sent.<kind>".
func refKey(notifier, ref string) string { return notifier + "." + ref }

func sentKey(notifier string, kind reclaim.MessageKind) string {
	return refKey(notifier, "sent."+string(kind))
}

func isSentKey(key string) bool { return strings.Contains(key, ".sent.") }

// send delivers a message through every notifier. It returns the refs and
// channels per notifier, and whether every blocking notifier delivered.
// Announce sends a message that belongs to no reclaim's lifecycle (the
// weekly report) through every notifier; it says whether the blocking
// ones delivered it.
func (e *Engine) Announce(ctx context.Context, m reclaim.Message) bool { return e.send(ctx, m, nil) }

func (e *Engine) send(ctx context.Context, m reclaim.Message, d *reclaim.Delivery) bool {
	ok := true
	if m.Reclaim != nil && m.Key == "" {
		m.Key = reclaim.MessageKey(m.Reclaim, m.Kind)
	}
	for _, n := range e.o.Notifiers {
		sent := sentKey(n.Name(), m.Kind)
		if d != nil && d.Refs[sent] != "" {
			continue // delivered on an earlier attempt
		}
		var prev map[string]string
		if m.Reclaim != nil {
			prev = refsOf(m.Reclaim, n.Name())
		}
		if e.fenced(reclaim.FencedMessage) != nil {
			return false
		}
		refs, channels, err := n.Send(ctx, m, prev)
		if err != nil {
			e.o.Metrics.message(n.Name(), m.Kind, reclaim.MessageError)
			e.o.Metrics.Error(reclaim.ComponentNotifier)
			e.o.Logger.Warn("sending a message failed", "notifier", n.Name(), "kind", m.Kind, "err", err)
			if d != nil {
				d.Error = fmt.Sprintf("%s: %v", n.Name(), err)
			}
			if n.Blocking() {
				ok = false
			}
			continue
		}
		e.o.Metrics.message(n.Name(), m.Kind, reclaim.MessageSent)
		if d != nil {
			if d.Refs == nil {
				d.Refs = map[string]string{}
			}
			d.Refs[sent] = "1"
			for k, v := range refs {
				d.Refs[refKey(n.Name(), k)] = v
			}
			d.Channels = append(d.Channels, channels...)
		}
	}
	return ok
}

// intent writes that a message is about to go, before its first attempt:
// if the reclaimer then stops before recording the delivery, the next
// attempt is marked Again and the notifiers that can look for the message
// do, rather than send it twice. It returns whether an attempt began
// before, and false if the intent could not be written (nothing is sent).
func (e *Engine) intent(id string, d *reclaim.Delivery, of func(*reclaim.Reclaim) *reclaim.Delivery) (again, ok bool) {
	if !d.FirstTry.IsZero() {
		return true, true
	}
	first := e.now()
	if _, err := e.update(id, nil, func(c *reclaim.Reclaim) bool { of(c).FirstTry = first; return true }); err != nil {
		e.o.Logger.Error("recording that a message is about to go: it waits", "reclaim", id, "err", err)
		return false, false
	}
	d.FirstTry = first
	return false, true
}

// refsOf collects one notifier's references across a reclaim's messages.
func refsOf(r *reclaim.Reclaim, notifier string) map[string]string {
	out := map[string]string{}
	prefix := refKey(notifier, "")
	for _, d := range []reclaim.Delivery{r.Warning, r.Final} {
		for k, v := range d.Refs {
			if ref, ok := strings.CutPrefix(k, prefix); ok && ref != "" {
				out[ref] = v
			}
		}
	}
	return out
}

// warn decides on a pending reclaim before its warning (decide), records
// the verdict, and delivers the warning or the notice.
func (e *Engine) warn(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.Warning.Sent {
		return
	}
	kind := reclaim.MsgWarning
	var v Verdict
	if r.State == reclaim.Pending {
		if v = e.verdict(ctx, r); !e.decided(r, v) {
			return
		}
		if r = e.snapshot(id); r == nil || r.Warning.Sent || r.State != reclaim.Pending && r.State != reclaim.Notified {
			return
		}
	}
	if r.State == reclaim.Notified {
		kind = reclaim.MsgNotice
	}
	// The grace belongs to the owner: it runs from this warning, however
	// late it goes out (a backlog, an outage, a restart), never from the alert.
	var actAt time.Time
	grace, shortened := v.Grace, v.Wanted
	if p := e.policy(r); kind == reclaim.MsgWarning && p != nil {
		now := e.now()
		full := now.Add(p.GraceTime())
		actAt = now.Add(grace)
		if r.ActAt.After(full) {
			actAt = r.ActAt // deferred further already (a window, a minimum runtime)
		}
		r.ActAt, r.Wanted = actAt, shortened
		r.AwaitsDemand = p.Demand != nil && p.Demand.Required
	}
	d := e.delivery(id, kind, r.Warning)
	var delivered bool
	if r.DryRun {
		delivered = true
		d.FirstTry = e.now()
		d.Channels = append(d.Channels, "dry run: not sent")
		e.o.Logger.Info("dry run: would warn the owner", "reclaim", id, "owner", r.Target.Holder(), "unit", r.Target.Unit(), "act_at", r.ActAt)
	} else {
		again, ok := e.intent(id, &d, func(c *reclaim.Reclaim) *reclaim.Delivery { return &c.Warning })
		if !ok {
			return
		}
		e.o.Failpoint("before-warning")
		delivered = e.send(ctx, reclaim.Message{Kind: kind, Reclaim: r, Text: text(kind, r), Again: again}, &d)
		e.o.Failpoint("after-warning")
	}
	d.Attempts++
	restate := false
	_, err := e.update(id, func(c *reclaim.Reclaim) []reclaim.Event {
		if delivered {
			return []reclaim.Event{e.event(c, "warned", fmt.Sprintf("%s via %v", kind, d.Channels), "reclaimer")}
		}
		return nil
	}, func(c *reclaim.Reclaim) bool {
		c.Warning = d
		if delivered {
			c.Warning.Sent, c.Warning.At, c.Warning.Error = true, e.now(), ""
			c.NextTry = time.Time{}
			if c.State == reclaim.Pending && (actAt.After(c.ActAt) || shortened) {
				c.ActAt = actAt // the time the warning states
			}
			c.Wanted, c.AwaitsDemand = r.Wanted, r.AwaitsDemand
			if real := c.Warning.At.Add(grace); c.State == reclaim.Pending && grace > 0 && real.Sub(c.ActAt) >= time.Second {
				// The send itself took long (retries, a slow API): the grace
				// runs from delivery, and the warning is put right.
				c.ActAt, restate = real, true
			}
			if c.State == reclaim.Cancelled {
				c.Final.Sent = false // cancelled while the warning was on its way: say so
			}
		} else {
			c.NextTry = e.now().Add(backoff(d.Attempts))
			c.Reason = "the owner's warning is not delivered yet: " + d.Error
		}
		return true
	})
	e.recorded(id, kind, d, err)
	if err != nil {
		e.o.Logger.Error("recording a warning", "reclaim", id, "err", err)
		return
	}
	if restate {
		e.restate(ctx, id)
	}
	if delivered && kind == reclaim.MsgNotice && r.TopOwner != nil && e.o.Events != nil {
		e.kubeEvent(ctx, r, "GPUIdleNotReclaimed", r.Reason)
	}
	if delivered && kind == reclaim.MsgWarning && e.o.Events != nil {
		e.kubeEvent(ctx, r, "GPUIdleWarning", fmt.Sprintf("%s is idle; it will be reclaimed (%s) after %s unless it is used again", r.Target.Unit(), r.ActionText(), r.ActAt.UTC().Format(time.RFC3339)))
	}
	if !delivered && !d.Escalated && e.now().Sub(d.FirstTry) >= time.Duration(e.o.Config.WarningDeadline) {
		e.o.Logger.Warn("the owner's warning is not delivered within the deadline: the reclaim waits", "reclaim", id, "owner", r.Target.Holder(), "err", d.Error)
		e.send(ctx, reclaim.Message{Kind: reclaim.MsgAdmin, Reclaim: r, Text: fmt.Sprintf("The warning to %s about %s has not been delivered for %s (%s); the reclaim waits until it is.", r.Target.Holder(), r.Target.Unit(), e.o.Config.WarningDeadline, d.Error)}, nil)
		if _, err := e.update(id, nil, func(c *reclaim.Reclaim) bool { c.Warning.Escalated = true; return true }); err != nil {
			e.o.Logger.Error("recording that the admins were told", "reclaim", id, "err", err)
		}
	}
}

// decided records a verdict taken before the warning, and says whether a
// warning or a notice is to be delivered now.
func (e *Engine) decided(r *reclaim.Reclaim, v Verdict) bool {
	switch v.Do {
	case DoExempt, DoWait, DoWarn, DoNotify:
	default:
		return false
	}
	c, applied, err := e.apply(r.ID, v)
	if err != nil {
		e.o.Logger.Error("recording a verdict before the warning", "reclaim", r.ID, "do", v.Do, "err", err)
		return false
	}
	if applied && c.State == reclaim.Notified && v.TopOwner != nil {
		e.o.Logger.Info("telling the owner only", "reclaim", r.ID, "pod", r.Target.Holder(), "top_owner", v.TopOwner.String(), "reason", v.Why)
	}
	return v.Do == DoWarn || v.Do == DoNotify
}

// restate updates a delivered warning in place with the time it acts at,
// through the notifiers that can (those that left a message to update).
func (e *Engine) restate(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil {
		return
	}
	m := reclaim.Message{Kind: reclaim.MsgWarning, Reclaim: r, Text: text(reclaim.MsgWarning, r), Restated: true}
	for _, n := range e.o.Notifiers {
		prev := refsOf(r, n.Name())
		if !hasMessage(prev) || e.fenced(reclaim.FencedMessage) != nil {
			continue
		}
		if _, _, err := n.Send(ctx, m, prev); err != nil {
			e.o.Metrics.Error(reclaim.ComponentNotifier)
			e.o.Logger.Warn("restating a warning's time failed: it states an earlier one", "notifier", n.Name(), "reclaim", id, "act_at", r.ActAt, "err", err)
		}
	}
	e.o.Logger.Info("warning delivered late: its time restated", "reclaim", id, "act_at", r.ActAt)
}

// hasMessage says whether a notifier's refs name a message it can update.
func hasMessage(refs map[string]string) bool {
	for k := range refs {
		if strings.HasPrefix(k, reclaim.MessageRefPrefix) {
			return true
		}
	}
	return false
}

// deferTo makes a reclaim wait until a time, saying why.
func (e *Engine) deferTo(id string, until time.Time, why string) {
	if _, _, err := e.apply(id, Verdict{Do: DoWait, Until: until, Why: why}); err != nil {
		e.o.Logger.Error("recording a deferral", "reclaim", id, "err", err)
	}
}

// text is a message's plain-text form, for logs, webhooks and fallbacks.
func text(kind reclaim.MessageKind, r *reclaim.Reclaim) string {
	t := r.Target
	switch kind {
	case reclaim.MsgWarning:
		s := fmt.Sprintf("%s held by %s has been idle since %s. It will be reclaimed (%s) at %s unless it is used again.",
			t.Unit(), t.Holder(), r.IdleSince().UTC().Format(time.RFC3339), r.ActionText(), r.ActAt.UTC().Format(time.RFC3339))
		switch shared := r.TopOwner.SharedText(); {
		case shared != "":
			s += " " + shared
		case r.OnlyShare():
			s += " Its other holders keep the GPU busy: stopping it frees its share, not the GPU."
		}
		if r.Wanted {
			s += " Others are waiting for a GPU of this kind, so the grace is shorter."
		}
		if r.AwaitsDemand {
			s += " It is reclaimed only once others wait for a GPU of this kind."
		}
		return s
	case reclaim.MsgNotice:
		if r.TopOwner != nil && r.Reason != "" {
			return fmt.Sprintf("%s held by %s: %s gpureclaim will do nothing: %s.", t.Unit(), t.Holder(), r.Annotations.Get("description"), r.Reason)
		}
		return fmt.Sprintf("%s held by %s: %s", t.Unit(), t.Holder(), r.Annotations.Get("description"))
	case reclaim.MsgReclaimed:
		s := fmt.Sprintf("%s held by %s was reclaimed (%s) at %s. %s", t.Unit(), t.Holder(), r.ActionText(), r.ActedAt.UTC().Format(time.RFC3339), r.Detail)
		if r.SharedWith != "" {
			s += ". Its share is freed; the GPU stays held: " + r.SharedWith + "."
		}
		return s
	case reclaim.MsgNotReleased:
		return fmt.Sprintf("%s held by %s was not released: %s. The admins are told.", t.Unit(), t.Holder(), r.Reason)
	case reclaim.MsgCancelled:
		return fmt.Sprintf("Reclaim of %s held by %s cancelled: %s.", t.Unit(), t.Holder(), r.Reason)
	case reclaim.MsgFailed:
		return fmt.Sprintf("Reclaim of %s held by %s failed: %s.", t.Unit(), t.Holder(), r.Reason)
	case reclaim.MsgAdmin:
		return fmt.Sprintf("%s held by %s: %s.", t.Unit(), t.Holder(), r.Reason)
	}
	return ""
}
