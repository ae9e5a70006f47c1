package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// Events writes Kubernetes Events about a reclaim on its pod or workload.
type Events interface {
	Event(ctx context.Context, r *Reclaim, reason, message string)
}

// Options are the engine's dependencies. Store, Actor and Clock are
// required; a nil Checker, Inspector or Events skips what they do.
type Options struct {
	Config    *config.Config
	Store     Store
	Checker   AlertChecker
	Inspector Inspector
	Actor     Actor
	Events    Events
	Notifiers []Notifier
	Clock     func() time.Time
	Logger    *slog.Logger
	Metrics   *Metrics
	// Failpoint, when set, is called at the named points of the lifecycle;
	// the crash tests kill the process there.
	Failpoint func(name string)
}

// Engine runs every reclaim's lifecycle.
type Engine struct {
	o Options

	mu       sync.Mutex
	index    map[string]*Reclaim // values are never changed once in: a write puts a new copy
	version  uint64              // counts the index's changes
	inflight map[string]bool     // side effects in progress, outside the lock
	breaker  bool
	wake     chan struct{}

	// The sorted view readers share, rebuilt when the index has changed,
	// outside the engine's lock: a status page over 60,000 reclaims does
	// not hold up a webhook.
	viewMu      sync.Mutex
	view        []*Reclaim
	viewVersion uint64
}

// New loads the store and resumes every reclaim where it stopped.
func New(o Options) (*Engine, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Failpoint == nil {
		o.Failpoint = func(string) {}
	}
	rs, err := o.Store.Load()
	if err != nil {
		return nil, fmt.Errorf("loading the store: %w", err)
	}
	e := &Engine{o: o, index: make(map[string]*Reclaim, len(rs)), inflight: map[string]bool{}, wake: make(chan struct{}, 1)}
	resumed := 0
	for _, r := range rs {
		e.index[r.ID] = r
		if !r.State.Terminal() {
			resumed++
		}
	}
	e.gauges()
	o.Logger.Info("store loaded", "reclaims", len(rs), "resumed", resumed)
	return e, nil
}

func (e *Engine) now() time.Time { return e.o.Clock() }

// persist writes reclaims and audit events; the caller holds e.mu.
func (e *Engine) persist(events []Event, rs ...*Reclaim) error {
	now := e.now()
	for _, r := range rs {
		r.Updated = now
	}
	if err := e.o.Store.Write(rs, events); err != nil {
		e.o.Metrics.Error("store")
		return err
	}
	return nil
}

func (e *Engine) event(r *Reclaim, kind, detail, actor string) Event {
	return Event{Time: e.now(), Reclaim: r.ID, Kind: kind, Target: r.Target.Unit() + " held by " + r.Target.Owner(), Detail: detail, Actor: actor}
}

// Kick makes Run take a step now rather than at its next tick.
func (e *Engine) Kick() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// IngestResult says what a notification changed.
type IngestResult struct {
	New, Duplicate, Cancelled, Ignored int
}

// Ingest records the alerts of one Alertmanager notification. When it
// returns nil every decision is durable; an error means nothing was
// recorded and the notification should be retried.
func (e *Engine) Ingest(alerts []template.Alert) (IngestResult, error) {
	var res IngestResult
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()

	changed := map[string]*Reclaim{}
	var events []Event
	get := func(id string) *Reclaim {
		if r, ok := changed[id]; ok {
			return r
		}
		return e.index[id]
	}
	put := func(r *Reclaim) { changed[r.ID] = r }
	decide := func(d string) { e.o.Metrics.decisions.WithLabelValues(d).Inc() }
	pendingByFP := map[string][]string{}
	latest := map[string]time.Time{} // the newest episode seen of each alert
	for id, r := range e.index {
		if r.State == Pending {
			pendingByFP[r.Fingerprint] = append(pendingByFP[r.Fingerprint], id)
		}
		if r.StartsAt.After(latest[r.Fingerprint]) {
			latest[r.Fingerprint] = r.StartsAt
		}
	}

	for _, a := range alerts {
		e.o.Metrics.alertsReceived.WithLabelValues(a.Status).Inc()
		t, ok := TargetFrom(a.Labels)
		if !ok {
			res.Ignored++
			decide("not_a_unit")
			continue
		}
		fp := a.Fingerprint
		if fp == "" {
			fp = Fingerprint(a.Labels)
		}
		id := ID(fp, a.StartsAt)
		existing := get(id)
		if a.Status == "resolved" {
			switch {
			case existing == nil:
				r := &Reclaim{ID: id, Fingerprint: fp, StartsAt: a.StartsAt, Labels: a.Labels, Target: t, State: Resolved, Reason: "resolved before it was seen firing", Created: now, Closed: now}
				put(r)
				decide("resolved_first")
			case existing.State == Pending || existing.State == Snoozed:
				c := clone(existing)
				e.cancel(c, "the alert resolved: the GPU is busy again or was released")
				put(c)
				events = append(events, e.event(c, "cancelled", c.Reason, "alertmanager"))
				res.Cancelled++
				decide("cancelled")
			default:
				res.Duplicate++
			}
			continue
		}
		if existing != nil {
			res.Duplicate++
			decide("duplicate")
			continue
		}
		if a.StartsAt.Before(latest[fp]) {
			// An older episode delivered after a newer one (an HA pair, a
			// retry): the newer one already speaks for the alert.
			res.Ignored++
			decide("stale")
			continue
		}
		latest[fp] = a.StartsAt
		// A new episode of an alert supersedes the last one's pending reclaim.
		for _, oldID := range pendingByFP[fp] {
			old := get(oldID)
			if old.State == Pending && old.StartsAt.Before(a.StartsAt) {
				c := clone(old)
				e.cancel(c, "superseded by a new episode of the alert")
				c.Final.Sent = true // the new episode's warning says it all
				put(c)
			}
		}
		r := &Reclaim{ID: id, Fingerprint: fp, StartsAt: a.StartsAt, Labels: a.Labels, Annotations: a.Annotations, Target: t, Created: now}
		p := matchPolicy(e.o.Config.Policies, a.Labels)
		if p == nil {
			r.State, r.Reason, r.Closed = Exempt, "no policy matches the alert", now
			r.Warning.Sent, r.Final.Sent = true, true
			put(r)
			res.Ignored++
			decide("no_policy")
			continue
		}
		r.Policy, r.Action, r.DryRun = p.Name, actionFor(p, t), e.o.Config.DryRun || p.DryRun
		switch exempt, why := exemptByConfig(e.o.Config, t); {
		case exempt:
			r.State, r.Reason, r.Closed = Exempt, why, now
			r.Warning.Sent, r.Final.Sent = true, true
			decide("exempt")
		case r.Action == config.ActionNotify:
			r.State, r.Reason, r.Closed = Notified, "the policy only notifies", now
			r.Final.Sent = true
			decide("notify")
		default:
			r.State, r.ActAt = Pending, now.Add(p.GraceTime())
			r.Reason = "warning the owner; reclaim after the grace period"
			decide("pending")
		}
		put(r)
		events = append(events, e.event(r, "decided", fmt.Sprintf("%s: policy %s, action %s", r.State, r.Policy, r.Action), "alertmanager"))
		res.New++
	}
	if len(changed) == 0 {
		return res, nil
	}
	rs := make([]*Reclaim, 0, len(changed))
	for _, r := range changed {
		rs = append(rs, r)
	}
	if err := e.persist(events, rs...); err != nil {
		return IngestResult{}, err
	}
	for _, r := range rs {
		e.index[r.ID] = r
	}
	e.version++
	e.o.Failpoint("ingested")
	e.gauges()
	e.Kick()
	return res, nil
}

func (e *Engine) cancel(r *Reclaim, why string) {
	r.State, r.Reason, r.Closed = Cancelled, why, e.now()
	// Tell the owner only if they were warned of something.
	r.Final.Sent = !r.Warning.Sent
}

// clone deep-copies a reclaim, so the index changes only once a write is durable.
func clone(r *Reclaim) *Reclaim { return r.Clone() }

// Run steps every tick until ctx ends, and at once after each Kick.
func (e *Engine) Run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		e.Step(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.wake:
		}
	}
}

type work struct {
	id   string
	kind string // warn, act, final
}

// Step does all the work that is due: warnings to send, actions to take,
// owners to tell. Side effects run outside the lock, one reclaim at a time.
func (e *Engine) Step(ctx context.Context) {
	now := e.now()
	e.o.Metrics.lastStepSeconds.Set(float64(now.Unix()))
	e.mu.Lock()
	breakerMsg := e.updateBreaker()
	var due []work
	for id, r := range e.index {
		if e.inflight[id] {
			continue
		}
		switch {
		case (r.State == Pending || r.State == Notified) && !r.Warning.Sent && !now.Before(r.NextTry):
			due = append(due, work{id, "warn"})
		case r.State == Pending && !now.Before(r.ActAt) && !now.Before(r.NextTry):
			due = append(due, work{id, "act"})
		case r.State == Acting && !now.Before(r.NextTry):
			due = append(due, work{id, "act"})
		case r.State == Snoozed && !now.Before(r.NextTry):
			due = append(due, work{id, "unsnooze"})
		case r.State.Terminal() && !r.Final.Sent && !now.Before(r.NextTry):
			due = append(due, work{id, "final"})
		}
	}
	for _, w := range due {
		e.inflight[w.id] = true
	}
	e.mu.Unlock()
	if breakerMsg != "" {
		e.send(ctx, Message{Kind: MsgAdmin, Text: breakerMsg}, nil)
	}
	// Oldest first: a burst of new alerts does not starve the reclaims due.
	sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
	for _, w := range due {
		switch w.kind {
		case "warn":
			e.warn(ctx, w.id)
		case "act":
			e.act(ctx, w.id)
		case "final":
			e.final(ctx, w.id)
		case "unsnooze":
			e.unsnooze(ctx, w.id)
		}
		e.mu.Lock()
		delete(e.inflight, w.id)
		e.mu.Unlock()
	}
	e.mu.Lock()
	e.gauges()
	e.mu.Unlock()
}

// updateBreaker opens the breaker while too many targets wait for an
// action, and closes it once they are fewer. The caller holds e.mu.
func (e *Engine) updateBreaker() string {
	max := *e.o.Config.CircuitBreaker.MaxPending
	if max == 0 {
		return ""
	}
	n := 0
	for _, r := range e.index {
		if r.State == Pending && !r.DryRun {
			n++
		}
	}
	switch {
	case !e.breaker && n >= max:
		e.breaker = true
		e.o.Metrics.breakerOpen.Set(1)
		e.o.Logger.Warn("circuit breaker open: holding every action", "pending", n, "max_pending", max)
		return fmt.Sprintf("Circuit breaker open: %d targets are pending at once (max_pending %d). No GPU will be reclaimed until they are fewer; check the exporters and the rules before anything else.", n, max)
	case e.breaker && n < max:
		e.breaker = false
		e.o.Metrics.breakerOpen.Set(0)
		e.o.Logger.Info("circuit breaker closed", "pending", n)
		return fmt.Sprintf("Circuit breaker closed: %d targets pending. Reclaims resume.", n)
	}
	return ""
}

// gauges sets the per-state gauge; the caller holds e.mu.
func (e *Engine) gauges() {
	counts := map[State]int{}
	for _, r := range e.index {
		counts[r.State]++
	}
	for _, s := range states {
		e.o.Metrics.reclaims.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

// snapshot returns a copy of a reclaim, or nil.
func (e *Engine) snapshot(id string) *Reclaim {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.index[id]; ok {
		return clone(r)
	}
	return nil
}

// update applies f to the stored reclaim and writes it; if f returns false
// nothing is written.
func (e *Engine) update(id string, events func(*Reclaim) []Event, f func(*Reclaim) bool) (*Reclaim, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	cur, ok := e.index[id]
	if !ok {
		return nil, fmt.Errorf("no reclaim %s", id)
	}
	c := clone(cur)
	if !f(c) {
		return cur, nil
	}
	var evs []Event
	if events != nil {
		evs = events(c)
	}
	if err := e.persist(evs, c); err != nil {
		return nil, err
	}
	e.index[id] = c
	e.version++
	return c, nil
}

func backoff(attempts int) time.Duration {
	d := time.Duration(1<<min(attempts, 8)) * time.Second
	return min(d, 5*time.Minute)
}

// send delivers a message through every notifier. It returns the refs and
// channels per notifier, and whether every blocking notifier delivered.
func (e *Engine) send(ctx context.Context, m Message, d *Delivery) bool {
	ok := true
	for _, n := range e.o.Notifiers {
		sentKey := n.Name() + ".sent." + string(m.Kind)
		if d != nil && d.Refs[sentKey] != "" {
			continue // delivered on an earlier attempt
		}
		var prev map[string]string
		if m.Reclaim != nil {
			prev = refsOf(m.Reclaim, n.Name())
		}
		refs, channels, err := n.Send(ctx, m, prev)
		if err != nil {
			e.o.Metrics.messages.WithLabelValues(n.Name(), string(m.Kind), "error").Inc()
			e.o.Metrics.Error("notifier")
			e.o.Logger.Warn("sending a message failed", "notifier", n.Name(), "kind", m.Kind, "err", err)
			if d != nil {
				d.Error = fmt.Sprintf("%s: %v", n.Name(), err)
			}
			if n.Blocking() {
				ok = false
			}
			continue
		}
		e.o.Metrics.messages.WithLabelValues(n.Name(), string(m.Kind), "sent").Inc()
		if d != nil {
			if d.Refs == nil {
				d.Refs = map[string]string{}
			}
			d.Refs[sentKey] = "1"
			for k, v := range refs {
				d.Refs[n.Name()+"."+k] = v
			}
			d.Channels = append(d.Channels, channels...)
		}
	}
	return ok
}

// refsOf collects one notifier's references across a reclaim's messages.
func refsOf(r *Reclaim, notifier string) map[string]string {
	out := map[string]string{}
	prefix := notifier + "."
	for _, d := range []Delivery{r.Warning, r.Final} {
		for k, v := range d.Refs {
			if len(k) > len(prefix) && k[:len(prefix)] == prefix {
				out[k[len(prefix):]] = v
			}
		}
	}
	return out
}

func (e *Engine) warn(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.Warning.Sent {
		return
	}
	if r.State == Pending && e.o.Inspector != nil {
		kept, why, err := e.o.Inspector.Kept(ctx, r.Target)
		if err != nil {
			e.o.Metrics.Error("kubernetes")
			e.o.Logger.Warn("looking up whether the target is kept", "reclaim", id, "err", err)
		}
		if kept {
			_, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, "exempt", why, "policy")} }, func(c *Reclaim) bool {
				if c.State != Pending {
					return false
				}
				c.State, c.Reason, c.Closed = Exempt, why, e.now()
				c.Warning.Sent, c.Final.Sent = true, true
				return true
			})
			if err == nil {
				e.o.Metrics.decisions.WithLabelValues("exempt").Inc()
			}
			return
		}
	}
	if r.State == Pending && e.o.Inspector != nil {
		if r = e.ownerAction(ctx, r); r == nil || r.State.Terminal() && r.State != Notified {
			return
		}
	}
	kind := MsgWarning
	if r.State == Notified {
		kind = MsgNotice
	}
	// The grace belongs to the owner: it runs from this warning, however
	// late it goes out (a backlog, an outage, a restart), never from the alert.
	var actAt time.Time
	if kind == MsgWarning {
		if p := e.policy(r); p != nil {
			actAt = e.now().Add(p.GraceTime())
			if r.ActAt.After(actAt) {
				actAt = r.ActAt // deferred further already (a window, a minimum runtime)
			}
			r.ActAt = actAt
		}
	}
	d := r.Warning
	if d.FirstTry.IsZero() {
		d.FirstTry = e.now()
	}
	var delivered bool
	if r.DryRun {
		delivered = true
		d.Channels = append(d.Channels, "dry run: not sent")
		e.o.Logger.Info("dry run: would warn the owner", "reclaim", id, "owner", r.Target.Owner(), "unit", r.Target.Unit(), "act_at", r.ActAt)
	} else {
		e.o.Failpoint("before-warning")
		delivered = e.send(ctx, Message{Kind: kind, Reclaim: r, Text: text(kind, r)}, &d)
		e.o.Failpoint("after-warning")
	}
	d.Attempts++
	_, err := e.update(id, func(c *Reclaim) []Event {
		if delivered {
			return []Event{e.event(c, "warned", fmt.Sprintf("%s via %v", kind, d.Channels), "reclaimer")}
		}
		return nil
	}, func(c *Reclaim) bool {
		c.Warning = d
		if delivered {
			c.Warning.Sent, c.Warning.At, c.Warning.Error = true, e.now(), ""
			c.NextTry = time.Time{}
			if c.State == Pending && actAt.After(c.ActAt) {
				c.ActAt = actAt // the time the warning states
			}
			if c.State == Cancelled {
				c.Final.Sent = false // cancelled while the warning was on its way: say so
			}
		} else {
			c.NextTry = e.now().Add(backoff(d.Attempts))
			c.Reason = "the owner's warning is not delivered yet: " + d.Error
		}
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a warning", "reclaim", id, "err", err)
		return
	}
	if delivered && kind == MsgNotice && r.Controller != nil && e.o.Events != nil {
		e.o.Events.Event(ctx, r, "GPUIdleNotReclaimed", r.Reason)
	}
	if delivered && kind == MsgWarning && e.o.Events != nil {
		e.o.Events.Event(ctx, r, "GPUIdleWarning", fmt.Sprintf("%s is idle; it will be reclaimed (%s) after %s unless it is used again", r.Target.Unit(), r.ActionText(), r.ActAt.UTC().Format(time.RFC3339)))
	}
	if !delivered && !d.Escalated && e.now().Sub(d.FirstTry) >= time.Duration(e.o.Config.WarningDeadline) {
		e.o.Logger.Warn("the owner's warning is not delivered within the deadline: the reclaim waits", "reclaim", id, "owner", r.Target.Owner(), "err", d.Error)
		e.send(ctx, Message{Kind: MsgAdmin, Reclaim: r, Text: fmt.Sprintf("The warning to %s about %s has not been delivered for %s (%s); the reclaim waits until it is.", r.Target.Owner(), r.Target.Unit(), e.o.Config.WarningDeadline, d.Error)}, nil)
		if _, err := e.update(id, nil, func(c *Reclaim) bool { c.Warning.Escalated = true; return true }); err != nil {
			e.o.Logger.Error("recording that the admins were told", "reclaim", id, "err", err)
		}
	}
}

// defer records why an action waits and until when.
func (e *Engine) deferTo(id string, until time.Time, why string) {
	_, err := e.update(id, nil, func(c *Reclaim) bool {
		if c.Reason != why {
			e.o.Logger.Info("reclaim waits", "reclaim", id, "until", until, "reason", why)
		}
		if c.State != Pending && c.State != Acting {
			return false
		}
		if c.State == Pending {
			c.ActAt = until
		} else {
			c.NextTry = until
		}
		c.Reason = why
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a deferral", "reclaim", id, "err", err)
	}
}

func (e *Engine) policy(r *Reclaim) *config.Policy { return e.o.Config.Policy(r.Policy) }

// actedTimes lists when actions were taken, globally or in a namespace.
func (e *Engine) actedTimes(namespace string) []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []time.Time
	for _, r := range e.index {
		if (r.State == Done || r.State == Acting) && !r.ActedAt.IsZero() && (namespace == "" || r.Target.Namespace == namespace) {
			out = append(out, r.ActedAt)
		}
	}
	return out
}

// checks runs everything that must hold before acting, in order. It
// returns false when the action must wait or was cancelled.
func (e *Engine) checks(ctx context.Context, r *Reclaim) bool {
	now := e.now()
	if !r.Warning.Sent {
		return false
	}
	e.mu.Lock()
	open := e.breaker
	e.mu.Unlock()
	if open {
		e.deferTo(r.ID, now.Add(time.Minute), "held: the circuit breaker is open")
		return false
	}
	p := e.policy(r)
	if p == nil {
		e.finish(r.ID, Cancelled, "its policy is gone from the config", nil)
		return false
	}
	if r.Released != "" {
		// The owner asked: no window, minimum runtime or rate limit holds
		// it, and their own snooze does not. It must still be the episode
		// they pressed on: resolved or superseded since, it is cancelled.
		return e.recheckEpisode(ctx, r)
	}
	if next := nextInWindows(p.Windows, now); next.After(now) {
		e.deferTo(r.ID, next, "outside the policy's windows; next at "+next.UTC().Format(time.RFC3339))
		e.o.Metrics.decisions.WithLabelValues("outside_window").Inc()
		return false
	}
	if e.o.Inspector != nil && p.MinRuntimeTime() > 0 {
		started, err := e.o.Inspector.Started(ctx, r.Target)
		switch {
		case errors.Is(err, ErrGone):
			e.finish(r.ID, Cancelled, "the workload is gone", nil)
			return false
		case err != nil:
			e.o.Metrics.Error("inspector")
			e.deferTo(r.ID, now.Add(time.Minute), "cannot tell when the workload started: "+err.Error())
			return false
		case now.Before(started.Add(p.MinRuntimeTime())):
			until := started.Add(p.MinRuntimeTime())
			e.deferTo(r.ID, until, fmt.Sprintf("the workload started %s ago; the policy spares it until it has run %s", now.Sub(started).Round(time.Second), p.MinRuntimeTime()))
			e.o.Metrics.decisions.WithLabelValues("min_runtime").Inc()
			return false
		}
	}
	rl := e.o.Config.RateLimits
	if hit, free := limited(rl.Global, e.actedTimes(""), now); hit {
		e.deferTo(r.ID, free, "held by the global rate limit")
		e.o.Metrics.decisions.WithLabelValues("rate_limited").Inc()
		return false
	}
	if r.Target.Namespace != "" {
		if hit, free := limited(rl.PerNamespace, e.actedTimes(r.Target.Namespace), now); hit {
			e.deferTo(r.ID, free, "held by the rate limit of namespace "+r.Target.Namespace)
			e.o.Metrics.decisions.WithLabelValues("rate_limited").Inc()
			return false
		}
	}
	return e.recheck(ctx, r)
}

// recheck asks Alertmanager whether the alert still fires, unsilenced.
func (e *Engine) recheck(ctx context.Context, r *Reclaim) bool { return e.recheckAlert(ctx, r, false) }

// recheckEpisode asks whether the episode still fires, silenced or not.
func (e *Engine) recheckEpisode(ctx context.Context, r *Reclaim) bool {
	return e.recheckAlert(ctx, r, true)
}

func (e *Engine) recheckAlert(ctx context.Context, r *Reclaim, silencedToo bool) bool {
	if e.o.Checker == nil {
		return true
	}
	chk, err := e.o.Checker.Check(ctx, r)
	if err != nil {
		e.o.Metrics.Error("alertmanager")
		e.deferTo(r.ID, e.now().Add(30*time.Second), "cannot re-check the alert in Alertmanager: "+err.Error())
		return false
	}
	switch {
	case chk.Status == AlertGone:
		e.finish(r.ID, Cancelled, "the alert no longer fires: the GPU is busy again or was released", nil)
		return false
	case chk.Status == AlertSilenced && !silencedToo:
		e.snooze(r.ID, chk, "")
		return false
	}
	return true
}

// snooze holds a reclaim while its alert is silenced or inhibited.
func (e *Engine) snooze(id string, chk AlertCheck, by string) {
	_, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, "snoozed", chk.Reason, by)} }, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Acting && c.State != Snoozed {
			return false
		}
		c.State, c.Reason = Snoozed, "the alert is silenced: "+chk.Reason
		c.SnoozedUntil, c.NextTry = chk.Until, chk.Until
		if chk.Until.IsZero() {
			c.NextTry = e.now().Add(5 * time.Minute) // an inhibition: look again
		}
		if by != "" {
			c.SnoozedBy = by
		}
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a snooze", "reclaim", id, "err", err)
		return
	}
	e.o.Metrics.decisions.WithLabelValues("snoozed").Inc()
}

// unsnooze looks at a snoozed reclaim once its silence has ended: if the
// alert still fires, the cycle starts again with a new warning and grace.
func (e *Engine) unsnooze(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.State != Snoozed {
		return
	}
	if e.o.Checker == nil {
		return
	}
	chk, err := e.o.Checker.Check(ctx, r)
	switch {
	case err != nil:
		e.o.Metrics.Error("alertmanager")
		if _, err := e.update(id, nil, func(c *Reclaim) bool { c.NextTry = e.now().Add(30 * time.Second); return true }); err != nil {
			e.o.Logger.Error("recording when to look at a snooze again", "reclaim", id, "err", err)
		}
	case chk.Status == AlertSilenced:
		e.snooze(id, chk, "")
	case chk.Status == AlertGone:
		e.finish(id, Cancelled, "the alert resolved while it was snoozed", nil)
	default:
		p := e.policy(r)
		if p == nil {
			e.finish(id, Cancelled, "its policy is gone from the config", nil)
			return
		}
		_, err := e.update(id, func(c *Reclaim) []Event {
			return []Event{e.event(c, "unsnoozed", "the snooze ended and the unit is still idle", "reclaimer")}
		}, func(c *Reclaim) bool {
			if c.State != Snoozed {
				return false
			}
			now := e.now()
			c.State, c.ActAt, c.NextTry = Pending, now.Add(p.GraceTime()), time.Time{}
			c.Reason = "the snooze ended and the unit is still idle: warning the owner again"
			c.Warning = Delivery{Refs: c.Warning.Refs}
			for k := range c.Warning.Refs {
				if strings.Contains(k, ".sent.") {
					delete(c.Warning.Refs, k) // a new warning is due; its message refs stay for updates
				}
			}
			return true
		})
		if err != nil {
			e.o.Logger.Error("reopening a snoozed reclaim", "reclaim", id, "err", err)
		}
	}
}

func (e *Engine) act(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.State.Terminal() {
		return
	}
	// An action that began and has no recorded outcome (the reclaimer
	// stopped during it) may have taken effect: the checks passed then, and
	// checking again now would judge its own effect (the pod gone, the GPU
	// free, the alert resolved) as a reason to cancel. The action is run
	// again, which every action allows, and its outcome recorded.
	resumed := r.State == Acting && !r.ActingSince.IsZero()
	if !resumed && !e.checks(ctx, r) {
		return
	}
	// What the action will end is written with the decision (a kill's
	// PIDs), so that after a restart the record says what was done.
	var planned []int
	if p, ok := e.o.Actor.(Planner); ok && !resumed && !r.DryRun {
		pids, err := p.Plan(ctx, r.Action, r)
		if err != nil && !errors.Is(err, ErrGone) {
			e.o.Logger.Warn("looking up what the action will end", "reclaim", id, "err", err)
		}
		planned = pids
	}
	// The decision is written before it is carried out.
	r, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, "acting", c.Action, "reclaimer")} }, func(c *Reclaim) bool {
		if c.State.Terminal() {
			return false
		}
		c.State, c.Attempts, c.Reason = Acting, c.Attempts+1, "acting: "+c.Action
		if c.ActingSince.IsZero() {
			c.ActingSince = e.now()
		}
		if planned != nil {
			c.Planned = planned
		}
		return true
	})
	if err != nil || r.State != Acting {
		return
	}
	e.o.Failpoint("before-action")
	now := e.now()
	if r.DryRun {
		e.o.Logger.Info("dry run: would reclaim", "reclaim", id, "action", r.Action, "owner", r.Target.Owner(), "unit", r.Target.Unit())
		e.o.Metrics.actions.WithLabelValues(r.Action, "dry_run").Inc()
		e.finish(id, DryRun, fmt.Sprintf("dry run: would have run %s", r.Action), nil)
		return
	}
	start := time.Now()
	res, err := e.o.Actor.Act(ctx, r.Action, r)
	e.o.Metrics.actionDuration.WithLabelValues(r.Action).Observe(time.Since(start).Seconds())
	e.o.Failpoint("after-action")
	var refused *RefusedError
	var retry *RetryError
	switch {
	case err == nil || errors.Is(err, ErrGone):
		result, detail := "done", res.Detail
		switch {
		case err != nil && resumed:
			result, detail = "gone", "the target is gone: the action begun before the reclaimer restarted took effect (or it left on its own)"
			if len(r.Planned) > 0 {
				res.Killed = r.Planned
				detail = fmt.Sprintf("processes %v are gone: the kill begun before the reclaimer restarted took effect (or they ended on their own)", r.Planned)
			}
		case err != nil:
			result, detail = "gone", "the target was already gone"
		}
		e.o.Metrics.actions.WithLabelValues(r.Action, result).Inc()
		idle := max(0, now.Sub(r.IdleSince()).Seconds())
		e.o.Metrics.reclaimedGPUs.Add(r.Target.Size())
		e.o.Metrics.reclaimedIdle.Add(r.Target.Size() * idle)
		e.o.Metrics.idleToAction.Observe(idle)
		e.finish(id, Done, detail, &res)
	case errors.As(err, &refused):
		e.o.Metrics.actions.WithLabelValues(r.Action, "refused").Inc()
		e.finish(id, Cancelled, refused.Reason, nil)
	case errors.As(err, &retry) && r.Attempts < 20:
		e.o.Metrics.actions.WithLabelValues(r.Action, "retry").Inc()
		e.deferTo(id, now.Add(retry.After), "will try again: "+err.Error())
		e.recordError(id, err)
	case r.Attempts < 5 && retry == nil:
		e.o.Metrics.actions.WithLabelValues(r.Action, "retry").Inc()
		e.o.Metrics.Error("action")
		e.deferTo(id, now.Add(backoff(r.Attempts)), "will try again: "+err.Error())
		e.recordError(id, err)
	default:
		e.o.Metrics.actions.WithLabelValues(r.Action, "failed").Inc()
		e.o.Metrics.Error("action")
		e.finish(id, Failed, err.Error(), nil)
	}
}

// recordError records an action that did not take effect: the next
// attempt checks everything again.
func (e *Engine) recordError(id string, err error) {
	if _, uerr := e.update(id, nil, func(c *Reclaim) bool { c.LastError, c.ActingSince = err.Error(), time.Time{}; return true }); uerr != nil {
		e.o.Logger.Error("recording an action's error", "reclaim", id, "err", uerr)
	}
}

// finish moves a reclaim to a terminal state.
func (e *Engine) finish(id string, st State, why string, res *Result) {
	r, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, string(st), why, "reclaimer")} }, func(c *Reclaim) bool {
		if c.State.Terminal() {
			return false
		}
		now := e.now()
		c.State, c.Reason, c.Closed, c.NextTry, c.ActingSince = st, why, now, time.Time{}, time.Time{}
		if st == Done || st == DryRun {
			c.ActedAt = now
		}
		if res != nil {
			c.Workload, c.Killed, c.Detail = res.Workload, res.Killed, res.Detail
		}
		c.Final.Sent = st == Cancelled && !c.Warning.Sent
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording the end of a reclaim", "reclaim", id, "err", err)
		return
	}
	e.o.Logger.Info("reclaim "+string(st), "reclaim", id, "reason", why, "unit", r.Target.Unit(), "owner", r.Target.Owner())
}

func (e *Engine) final(ctx context.Context, id string) {
	r := e.snapshot(id)
	if r == nil || r.Final.Sent {
		return
	}
	var kind MessageKind
	switch r.State {
	case Done:
		kind = MsgReclaimed
	case Cancelled:
		kind = MsgCancelled
	case Failed:
		kind = MsgFailed
	case DryRun:
		kind = MsgAdmin
	default:
		if _, err := e.update(id, nil, func(c *Reclaim) bool { c.Final.Sent = true; return true }); err != nil {
			e.o.Logger.Error("recording that nothing is left to tell", "reclaim", id, "err", err)
		}
		return
	}
	d := r.Final
	e.o.Failpoint("before-final")
	delivered := e.send(ctx, Message{Kind: kind, Reclaim: r, Text: text(kind, r)}, &d)
	d.Attempts++
	_, err := e.update(id, nil, func(c *Reclaim) bool {
		c.Final = d
		if delivered || d.Attempts >= 10 {
			c.Final.Sent, c.Final.At = true, e.now()
		} else {
			c.NextTry = e.now().Add(backoff(d.Attempts))
		}
		return true
	})
	if err != nil {
		e.o.Logger.Error("recording a final message", "reclaim", id, "err", err)
		return
	}
	if e.o.Events != nil {
		switch r.State {
		case Done:
			e.o.Events.Event(ctx, r, "GPUReclaimed", fmt.Sprintf("%s reclaimed (%s): %s", r.Target.Unit(), r.ActionText(), r.Detail))
		case Cancelled:
			e.o.Events.Event(ctx, r, "GPUReclaimCancelled", "reclaim cancelled: "+r.Reason)
		}
	}
}

// text is a message's plain-text form, for logs, webhooks and fallbacks.
func text(kind MessageKind, r *Reclaim) string {
	t := r.Target
	switch kind {
	case MsgWarning:
		return fmt.Sprintf("%s held by %s has been idle since %s. It will be reclaimed (%s) at %s unless it is used again.",
			t.Unit(), t.Owner(), r.IdleSince().UTC().Format(time.RFC3339), r.ActionText(), r.ActAt.UTC().Format(time.RFC3339))
	case MsgNotice:
		if r.Controller != nil && r.Reason != "" {
			return fmt.Sprintf("%s held by %s: %s gpureclaim will do nothing: %s.", t.Unit(), t.Owner(), r.Annotations["description"], r.Reason)
		}
		return fmt.Sprintf("%s held by %s: %s", t.Unit(), t.Owner(), r.Annotations["description"])
	case MsgReclaimed:
		return fmt.Sprintf("%s held by %s was reclaimed (%s) at %s. %s", t.Unit(), t.Owner(), r.ActionText(), r.ActedAt.UTC().Format(time.RFC3339), r.Detail)
	case MsgCancelled:
		return fmt.Sprintf("Reclaim of %s held by %s cancelled: %s.", t.Unit(), t.Owner(), r.Reason)
	case MsgFailed:
		return fmt.Sprintf("Reclaim of %s held by %s failed: %s.", t.Unit(), t.Owner(), r.Reason)
	case MsgAdmin:
		return fmt.Sprintf("%s held by %s: %s.", t.Unit(), t.Owner(), r.Reason)
	}
	return ""
}

// List returns every reclaim, newest first. The reclaims are shared with
// the engine and other readers: read them, never change them.
func (e *Engine) List() []*Reclaim {
	e.viewMu.Lock()
	defer e.viewMu.Unlock()
	e.mu.Lock()
	if e.view != nil && e.viewVersion == e.version {
		v := e.view
		e.mu.Unlock()
		return v
	}
	ver := e.version
	out := make([]*Reclaim, 0, len(e.index))
	for _, r := range e.index {
		out = append(out, r)
	}
	e.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return newer(out[i], out[j]) })
	e.view, e.viewVersion = out, ver
	return out
}

// newer orders reclaims newest first, then by ID.
func newer(a, b *Reclaim) bool {
	if !a.Created.Equal(b.Created) {
		return a.Created.After(b.Created)
	}
	return a.ID < b.ID
}

// Query selects a page of reclaims.
type Query struct {
	// States keeps these states only; none keeps all.
	States map[State]bool
	// Limit bounds the page; 0 means no bound.
	Limit int
	// After is the last ID of the previous page.
	After string
}

// Page is one page of reclaims, newest first.
type Page struct {
	Reclaims []*Reclaim
	// Next is the After of the next page; empty on the last.
	Next string
}

// Page returns a page of reclaims, shared as List's are.
func (e *Engine) Page(q Query) Page {
	all := e.List()
	start := 0
	if q.After != "" {
		e.mu.Lock()
		last, ok := e.index[q.After]
		e.mu.Unlock()
		if ok {
			start = sort.Search(len(all), func(i int) bool { return newer(last, all[i]) })
		}
	}
	var p Page
	for _, r := range all[start:] {
		if len(q.States) > 0 && !q.States[r.State] {
			continue
		}
		if q.Limit > 0 && len(p.Reclaims) == q.Limit {
			p.Next = p.Reclaims[len(p.Reclaims)-1].ID
			break
		}
		p.Reclaims = append(p.Reclaims, r)
	}
	return p
}

// Get returns a copy of one reclaim.
func (e *Engine) Get(id string) (*Reclaim, bool) {
	r := e.snapshot(id)
	return r, r != nil
}

// Audit returns the newest audit events.
func (e *Engine) Audit(limit int) ([]Event, error) { return e.o.Store.Audit(limit) }

// BreakerOpen says whether the circuit breaker holds the actions.
func (e *Engine) BreakerOpen() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.breaker
}

// Restorer undoes a scale-down.
type Restorer interface {
	Restore(ctx context.Context, r *Reclaim) error
}

// ErrNotRestorable says a reclaim has nothing to restore.
var ErrNotRestorable = errors.New("nothing to restore: only a done scale-down or stop can be restored")

// Restore undoes a scale-down or a stop, once.
func (e *Engine) Restore(ctx context.Context, id, by string) (*Reclaim, error) {
	return e.restore(ctx, id, by)
}

func (e *Engine) restore(ctx context.Context, id, by string) (*Reclaim, error) {
	r := e.snapshot(id)
	if r == nil {
		return nil, fmt.Errorf("no reclaim %s", id)
	}
	if r.State != Done || r.Workload == nil {
		return nil, ErrNotRestorable
	}
	if !r.Restored.IsZero() {
		return r, nil // restored before: nothing twice
	}
	rs, ok := e.o.Actor.(Restorer)
	if !ok {
		return nil, ErrNotRestorable
	}
	if err := rs.Restore(ctx, r); err != nil {
		e.o.Metrics.Error("kubernetes")
		return nil, err
	}
	r, err := e.update(id, func(c *Reclaim) []Event {
		return []Event{e.event(c, "restored", c.Workload.RestoredText(), by)}
	}, func(c *Reclaim) bool { c.Restored = e.now(); return true })
	if err != nil {
		return nil, err
	}
	e.send(ctx, Message{Kind: MsgRestored, Reclaim: r, By: by, Text: fmt.Sprintf("%s by %s.", r.Workload.RestoredText(), by)}, nil)
	if e.o.Events != nil {
		e.o.Events.Event(ctx, r, "GPUReclaimRestored", fmt.Sprintf("%s by %s", r.Workload.RestoredText(), by))
	}
	return r, nil
}

// Prune forgets reclaims that ended before the given time.
func (e *Engine) Prune(before time.Time) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n, err := e.o.Store.Prune(before)
	if err != nil {
		return 0, err
	}
	for id, r := range e.index {
		if r.State.Terminal() && r.Final.Sent && !r.Closed.IsZero() && r.Closed.Before(before) {
			delete(e.index, id)
		}
	}
	e.version++
	return n, nil
}

// ErrNotPending says a reclaim has moved on and the request no longer applies.
var ErrNotPending = errors.New("the reclaim is no longer pending")

// Snooze holds a pending reclaim until a silence ends; when it ends and
// the unit is still idle, the cycle starts again.
func (e *Engine) Snooze(ctx context.Context, id, by string, until time.Time, silence string) (*Reclaim, error) {
	r, err := e.update(id, func(c *Reclaim) []Event {
		return []Event{e.event(c, "snoozed", "until "+until.UTC().Format(time.RFC3339)+", silence "+silence, by)}
	}, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Snoozed {
			return false
		}
		c.State, c.SnoozedBy, c.SnoozedUntil, c.Silence = Snoozed, by, until, silence
		c.NextTry, c.Reason = until, "snoozed by "+by+" until "+until.UTC().Format(time.RFC3339)
		return true
	})
	if err != nil {
		return nil, err
	}
	if r.State != Snoozed || r.Silence != silence {
		return r, ErrNotPending
	}
	e.o.Metrics.decisions.WithLabelValues("snoozed").Inc()
	e.send(ctx, Message{Kind: MsgSnoozed, Reclaim: r, By: by, Text: fmt.Sprintf("%s snoozed the reclaim of %s until %s.", by, r.Target.Unit(), until.UTC().Format(time.RFC3339))}, nil)
	return r, nil
}

// Keep exempts a reclaim for good: a silence covers the workload until it ends.
func (e *Engine) Keep(ctx context.Context, id, by string, until time.Time, silence string) (*Reclaim, error) {
	r, err := e.update(id, func(c *Reclaim) []Event {
		return []Event{e.event(c, "kept", "silence "+silence+" until the workload ends (at most "+until.UTC().Format(time.RFC3339)+")", by)}
	}, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Snoozed {
			return false
		}
		c.State, c.Reason, c.Closed = Exempt, "kept by "+by, e.now()
		c.SnoozedBy, c.SnoozedUntil, c.Silence = by, until, silence
		c.Final.Sent = true // the kept message says it all
		return true
	})
	if err != nil {
		return nil, err
	}
	if r.State != Exempt || r.Silence != silence {
		return r, ErrNotPending
	}
	e.o.Metrics.decisions.WithLabelValues("kept").Inc()
	e.send(ctx, Message{Kind: MsgKept, Reclaim: r, By: by, Text: fmt.Sprintf("%s keeps %s until the workload ends.", by, r.Target.Unit())}, nil)
	return r, nil
}

// ReleaseNow acts at once at the owner's request: the grace, the minimum
// runtime and the schedule windows no longer apply.
func (e *Engine) ReleaseNow(ctx context.Context, id, by string) (*Reclaim, error) {
	r, err := e.update(id, func(c *Reclaim) []Event { return []Event{e.event(c, "released", "by the owner: acting now", by)} }, func(c *Reclaim) bool {
		if c.State != Pending && c.State != Snoozed {
			return false
		}
		c.State, c.ActAt, c.NextTry, c.Released = Pending, e.now(), time.Time{}, by
		c.Warning.Sent = true // the owner pressed the button on it
		c.Reason = "released by " + by + ": acting now"
		return true
	})
	if err != nil {
		return nil, err
	}
	if r.Released != by || r.State != Pending {
		return r, ErrNotPending
	}
	e.send(ctx, Message{Kind: MsgReleased, Reclaim: r, By: by, Text: fmt.Sprintf("%s released %s: reclaiming now.", by, r.Target.Unit())}, nil)
	e.Kick()
	return r, nil
}
