// Package lifecycle runs every reclaim's life: an alert becomes a
// reclaim, the policy decides, the owner is warned, the grace runs out,
// the target is checked again, then acted on, recorded and the owner
// told. Each step is a verdict (decide.go), a transition to the next
// record (transition.go), a write and then an effect; every step is
// written to the store before it is carried out, so a restart resumes
// where it stopped and nothing happens twice.
package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/ledger"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Options are the engine's dependencies. Store, Actor and Clock are
// required; a nil Checker, Inspector or Events skips what they do.
type Options struct {
	Config    *config.Config
	Store     reclaim.Store
	Checker   reclaim.AlertChecker
	Inspector reclaim.Inspector
	Actor     reclaim.Actor
	// Planner, when set, says before an action what it sets out to end (a
	// kill's PIDs), written with the decision; Restorer, when set, undoes
	// a stop or a scale-down. Both are usually the Actor.
	Planner  reclaim.Planner
	Restorer reclaim.Restorer
	// Journal, when set, records a notification before its decisions are
	// all written and replays it at the start (journal-first ingest); the
	// stores keep one.
	Journal reclaim.Journal
	// Verifier looks whether an action freed the GPU and a restore ran the
	// workload again; nil takes every action's word for it.
	Verifier  reclaim.Verifier
	Events    reclaim.Events
	Notifiers []reclaim.Notifier
	Clock     func() time.Time
	Logger    *slog.Logger
	Metrics   *Metrics
	// Failpoint, when set, is called at the named points of the lifecycle;
	// the crash tests kill the process there.
	Failpoint func(name string)
	// Leadership, with two replicas, is checked before every write, action
	// and message; nil runs alone.
	Leadership reclaim.Leadership
	// Prometheus answers whether GPUs of a kind are wanted, for the
	// policies with demand; nil when none is configured.
	Prometheus DemandQuerier
}

// Engine runs every reclaim's lifecycle.
type Engine struct {
	o Options

	mu sync.Mutex // guards the ledger and what follows
	// ledger is the reclaims in memory and their writes under way.
	ledger   *ledger.Ledger
	inflight map[string]bool // side effects in progress, outside the lock
	// unrecorded keeps a message's delivery that was sent but whose record
	// could not be written (the store unreachable), by reclaim and kind:
	// the retry writes it, and sends nothing again.
	unrecorded map[string]reclaim.Delivery
	breaker    bool
	wake       chan struct{}
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
	e := &Engine{o: o, inflight: map[string]bool{}, unrecorded: map[string]reclaim.Delivery{}, wake: make(chan struct{}, 1)}
	lo := ledger.Options{Store: o.Store, Journal: o.Journal, Lock: &e.mu, MayWrite: func() error { return e.fenced(reclaim.FencedWrite) },
		Clock: o.Clock, AnswerWithin: time.Duration(o.Config.Webhook.AnswerWithin), Written: e.Kick,
		StoreFailed: func() { o.Metrics.Error(reclaim.ComponentStore) }, Unwritten: func(n int) { o.Metrics.unwritten.Set(float64(n)) },
		Failpoint: o.Failpoint, Logger: o.Logger}
	if o.Leadership != nil {
		lo.Token = o.Leadership.Token
	}
	e.ledger = ledger.New(lo, rs)
	resumed := 0
	for _, r := range rs {
		if !r.State.Terminal() {
			resumed++
		}
	}
	// Not yet shared: the journal's notifications are decided without
	// the lock.
	if err := e.ledger.Replay(e.decideJournaled); err != nil {
		return nil, err
	}
	e.gauges()
	o.Logger.Info("store loaded", "reclaims", len(rs), "resumed", resumed)
	return e, nil
}

func (e *Engine) now() time.Time { return e.o.Clock() }

// delivery is where a message of a reclaim stands: the last delivery sent
// but not yet recorded, else the recorded one.
func (e *Engine) delivery(id string, kind reclaim.MessageKind, recorded reclaim.Delivery) reclaim.Delivery {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.unrecorded[id+"/"+string(kind)]; ok {
		return d
	}
	return recorded
}

// recorded notes whether a delivery's record was written: if not, it is
// kept for the retry.
func (e *Engine) recorded(id string, kind reclaim.MessageKind, d reclaim.Delivery, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.unrecorded[id+"/"+string(kind)] = d
		return
	}
	delete(e.unrecorded, id+"/"+string(kind))
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fenced says whether this replica must refrain from what (a write, an
// action, a message): it may have lost the Lease.
func (e *Engine) fenced(what reclaim.Fenced) error {
	if e.o.Leadership == nil {
		return nil
	}
	if err := e.o.Leadership.Check(); err != nil {
		e.o.Metrics.fenced.WithLabelValues(string(what)).Inc()
		e.o.Logger.Warn("refused: leadership in doubt", "what", what, "err", err)
		return fmt.Errorf("%w: %v", reclaim.ErrNotLeader, err)
	}
	return nil
}

// kubeEvent writes a Kubernetes Event about a reclaim, if this replica still leads.
func (e *Engine) kubeEvent(ctx context.Context, r *reclaim.Reclaim, reason, message string) {
	if e.o.Events == nil || e.fenced(reclaim.FencedEvent) != nil {
		return
	}
	e.o.Events.Event(ctx, r, reason, message)
}

func (e *Engine) event(r *reclaim.Reclaim, kind, detail, actor string) reclaim.Event {
	return newEvent(r, e.now(), kind, detail, actor)
}

// Kick makes Run take a step now rather than at its next tick.
func (e *Engine) Kick() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run steps every tick until ctx ends, and at once after each Kick, and
// runs the jobs on their own timers meanwhile. A step takes about a tick
// at most, then starts over with what is due then: a burst of warnings
// does not hold up an action that falls due.
func (e *Engine) Run(ctx context.Context, tick time.Duration, jobs ...Job) {
	e.runJobs(ctx, jobs)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		e.step(ctx, tick)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-e.wake:
		}
	}
}

// workKind is a step of a reclaim's lifecycle that Step runs when due.
type workKind int

const (
	workWarn     workKind = iota // send the owner's warning
	workAct                      // free the unit (or resume an action)
	workUnsnooze                 // look whether a snooze has ended
	workFinal                    // tell the owner the outcome
	workRestore                  // look whether a restored workload runs again
	workFollow                   // look whether a stop left in place was carried out
)

type work struct {
	id   string
	kind workKind
	due  time.Time // since when it has been due
}

// Step does all the work that is due: warnings to send, actions to take,
// owners to tell. Side effects run outside the lock, one reclaim at a time.
func (e *Engine) Step(ctx context.Context) { e.step(ctx, 0) }

// step does the work due, longest due first, for about budget (0: all of
// it); what is left is looked at again at once.
func (e *Engine) step(ctx context.Context, budget time.Duration) {
	e.mu.Lock()
	now := e.now() // after the lock: nothing written before it is missed
	e.o.Metrics.lastStepSeconds.Set(float64(now.Unix()))
	breakerMsg := e.updateBreaker()
	var due []work
	for id, r := range e.ledger.All() {
		if e.inflight[id] || e.ledger.Unwritten(id) != nil || now.Before(r.NextTry) {
			continue
		}
		switch {
		case (r.State == reclaim.Pending || r.State == reclaim.Notified) && !r.Warning.Sent:
			due = append(due, work{id, workWarn, later(r.Created, r.NextTry)})
		case r.State == reclaim.Pending && !now.Before(r.ActAt):
			due = append(due, work{id, workAct, later(r.ActAt, r.NextTry)})
		case r.State == reclaim.Acting:
			due = append(due, work{id, workAct, r.NextTry})
		case r.State == reclaim.Snoozed:
			due = append(due, work{id, workUnsnooze, r.NextTry})
		case r.State.Terminal() && !r.Final.Sent:
			due = append(due, work{id, workFinal, later(r.Closed, r.NextTry)})
		case (r.State == reclaim.Done || r.State == reclaim.NotReleased) && r.Restore.Pending():
			due = append(due, work{id, workRestore, later(r.Restore.AskedAt, r.NextTry)})
		case r.State == reclaim.NotReleased && r.StopInPlace && r.Restore == nil:
			due = append(due, work{id, workFollow, later(r.Closed, r.NextTry)})
		}
	}
	for _, w := range due {
		e.inflight[w.id] = true
	}
	e.mu.Unlock()
	if breakerMsg != "" {
		e.send(ctx, reclaim.Message{Kind: reclaim.MsgAdmin, Text: breakerMsg}, nil)
	}
	// Actions first, then longest due first: a GPU held past its grace
	// waits for no burst of warnings (a warning sent late delays only its
	// own reclaim: the grace runs from it).
	slices.SortFunc(due, func(a, b work) int {
		if (a.kind == workAct) != (b.kind == workAct) {
			if a.kind == workAct {
				return -1
			}
			return 1
		}
		if c := a.due.Compare(b.due); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	start := time.Now()
	for n, w := range due {
		if n > 0 && budget > 0 && time.Since(start) > budget {
			// Out of time: put the rest back and look again at once.
			e.mu.Lock()
			for _, left := range due[n:] {
				delete(e.inflight, left.id)
			}
			e.mu.Unlock()
			e.Kick()
			break
		}
		switch w.kind {
		case workWarn:
			e.warn(ctx, w.id)
		case workAct:
			e.act(ctx, w.id)
		case workFinal:
			e.final(ctx, w.id)
		case workUnsnooze:
			e.unsnooze(ctx, w.id)
		case workRestore:
			if r := e.snapshot(w.id); r != nil {
				e.verifyRestore(ctx, r)
			}
		case workFollow:
			if r := e.snapshot(w.id); r != nil {
				e.follow(ctx, r)
			}
		}
		e.mu.Lock()
		delete(e.inflight, w.id)
		e.mu.Unlock()
	}
	e.mu.Lock()
	e.gauges()
	e.mu.Unlock()
}

// gauges sets the per-state gauge; the caller holds e.mu.
func (e *Engine) gauges() {
	for _, s := range reclaim.States {
		e.o.Metrics.reclaims.WithLabelValues(string(s)).Set(float64(e.ledger.Count(s)))
	}
	e.o.Metrics.unwritten.Set(float64(e.ledger.UnwrittenCount()))
}

// snapshot returns a copy of a reclaim, or nil.
func (e *Engine) snapshot(id string) *reclaim.Reclaim {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r, ok := e.ledger.Get(id); ok {
		return r.Clone()
	}
	return nil
}

// apply records a verdict: the stored reclaim's transition under v,
// written with its events. It returns the record as it stands after, and
// whether v applied; a verdict's decision is counted once recorded.
func (e *Engine) apply(id string, v Verdict) (*reclaim.Reclaim, bool, error) {
	applied := false
	r, err := e.write(id, func(cur *reclaim.Reclaim) (*reclaim.Reclaim, []reclaim.Event) {
		next, events := transition(cur, v, e.now())
		if next == nil {
			return nil, nil
		}
		if v.Do == DoWait && next.Reason != cur.Reason {
			e.o.Logger.Info("reclaim waits", "reclaim", id, "until", v.Until, "reason", v.Why)
		}
		applied = true
		return next, events
	})
	if err != nil {
		return nil, false, err
	}
	if applied && v.Decision != "" {
		e.o.Metrics.decide(v.Decision)
	}
	if applied && r.State.Terminal() {
		e.o.Logger.Info("reclaim "+string(r.State), "reclaim", id, "reason", r.Reason, "unit", r.Target.Unit(), "owner", r.Target.Holder())
	}
	return r, applied, nil
}

// update applies f to a copy of the stored reclaim and writes it; if f
// returns false nothing is written.
func (e *Engine) update(id string, events func(*reclaim.Reclaim) []reclaim.Event, f func(*reclaim.Reclaim) bool) (*reclaim.Reclaim, error) {
	return e.write(id, func(cur *reclaim.Reclaim) (*reclaim.Reclaim, []reclaim.Event) {
		c := cur.Clone()
		if !f(c) {
			return nil, nil
		}
		var evs []reclaim.Event
		if events != nil {
			evs = events(c)
		}
		return c, evs
	})
}

// write replaces the stored reclaim with the record next makes of it (a
// new one: the stored one is shared with readers), and writes it with
// its events; when next gives none, nothing is written and the stored
// reclaim is returned.
func (e *Engine) write(id string, next func(cur *reclaim.Reclaim) (*reclaim.Reclaim, []reclaim.Event)) (*reclaim.Reclaim, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.ledger.AwaitWritten(id); err != nil {
		return nil, err
	}
	cur, ok := e.ledger.Get(id)
	if !ok {
		return nil, fmt.Errorf("no reclaim %s", id)
	}
	c, events := next(cur)
	if c == nil {
		return cur, nil
	}
	if err := e.ledger.WriteNow(events, c); err != nil {
		return nil, err
	}
	return c, nil
}
