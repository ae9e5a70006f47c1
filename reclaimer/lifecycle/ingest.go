package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/ledger"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// IngestResult says what a notification changed. Journaled counts the
// alerts of a notification put in the journal to be decided after the
// answer.
type IngestResult struct {
	New, Duplicate, Cancelled, Ignored, Journaled int
}

// IngestNotification decides on the alerts of one Alertmanager
// notification. When it returns nil every decision is in the store, or the
// notification is in the store's journal and its decisions are still being
// made or written (package ledger); an error means the notification should be
// retried: the retry waits for what this one began to write.
func (e *Engine) IngestNotification(n *notification.Notification) (IngestResult, error) {
	arrived := n.Received
	if arrived.IsZero() {
		arrived = time.Now()
	}
	if err := e.fenced(reclaim.FencedWrite); err != nil {
		return IngestResult{}, err
	}
	if e.o.Journal != nil && len(n.Alerts) > ledger.JournalFirst {
		err := e.ledger.JournalThenDecide(n, func(part []notification.Alert) (int, []*ledger.Queued) {
			e.mu.Lock()
			defer e.mu.Unlock()
			return e.decideJournaled(part)
		})
		if err != nil {
			return IngestResult{}, err
		}
		return IngestResult{Journaled: len(n.Alerts)}, nil
	}
	e.mu.Lock()
	res, deps := e.ingest(n.Alerts)
	e.mu.Unlock()
	return res, e.ledger.Await(deps, n, arrived)
}

// decideJournaled decides alerts from the journal, as the ledger asks
// (ledger.Decide); the caller holds e.mu or has not shared the engine.
func (e *Engine) decideJournaled(alerts []notification.Alert) (int, []*ledger.Queued) {
	res, ws := e.ingest(alerts)
	return res.New, ws
}

// Flush waits until every decision taken so far is in the store.
func (e *Engine) Flush() error { return e.ledger.Flush() }

// Ingest decides on alerts as IngestNotification does, for callers that
// build them (the backtest, tests).
func (e *Engine) Ingest(alerts []notification.Alert) (IngestResult, error) {
	return e.IngestNotification(&notification.Notification{Alerts: alerts, Version: "4"})
}

// ingest decides and queues the writes; it returns the writes the answer
// waits for. The caller holds e.mu.
func (e *Engine) ingest(alerts []notification.Alert) (IngestResult, []*ledger.Queued) {
	var res IngestResult
	now := e.now()
	var deps []*ledger.Queued

	// Sized for the notification: growing them cost a tenth of the time
	// of one of 100,000 alerts.
	changed := make(map[string]*reclaim.Reclaim, len(alerts))
	var events []reclaim.Event
	get := func(id string) *reclaim.Reclaim {
		if r, ok := changed[id]; ok {
			return r
		}
		r, _ := e.ledger.Get(id)
		return r
	}
	put := func(r *reclaim.Reclaim) { changed[r.ID] = r }
	count := e.o.Metrics.decide
	// The newest episode seen of each alert, and the alert of each unit's
	// open reclaim: from the index as it was, then what this notification adds.
	latest := make(map[string]time.Time, len(alerts))
	latestOf := func(fp string) time.Time {
		if t, ok := latest[fp]; ok {
			return t
		}
		var t time.Time
		for _, id := range e.ledger.ByAlert(fp) {
			if r, _ := e.ledger.Get(id); r.StartsAt.After(t) {
				t = r.StartsAt
			}
		}
		latest[fp] = t
		return t
	}
	open := make(map[reclaim.TargetKey]string, len(alerts))
	otherOpen := func(k reclaim.TargetKey, fp string) bool {
		if other, ok := open[k]; ok {
			return other != fp
		}
		for _, id := range e.ledger.OpenOnUnit(k) {
			if r, _ := e.ledger.Get(id); r.Fingerprint != fp {
				return true
			}
		}
		return false
	}
	// Newest episode first: an older one in the same notification is then
	// stale, and never warned only to be cancelled.
	if !slices.IsSortedFunc(alerts, ledger.NewestFirst) {
		alerts = slices.Clone(alerts)
		slices.SortStableFunc(alerts, ledger.NewestFirst)
	}

	cfg := e.o.Config
	var others int // alerts of another cluster
	var other string
	defer func() {
		if others > 0 {
			e.o.Logger.Warn("refused alerts of another cluster: nothing is done or said about them",
				"alerts", others, "cluster", cfg.Cluster, "label", cfg.ClusterLabel, "first", other)
		}
	}()
	for _, a := range alerts {
		e.o.Metrics.alertsReceived.WithLabelValues(a.Status).Inc()
		if cfg.Cluster != "" && a.Labels.Get(cfg.ClusterLabel) != cfg.Cluster {
			if others == 0 {
				other = a.Labels.String()
			}
			others++
			res.Ignored++
			count(reclaim.DecisionOtherCluster)
			continue
		}
		t, ok := reclaim.TargetFrom(a.Labels)
		if !ok {
			res.Ignored++
			count(reclaim.DecisionNotAUnit)
			continue
		}
		fp := a.Fingerprint
		if fp == "" {
			fp = reclaim.Fingerprint(a.Labels)
		}
		id := reclaim.ID(fp, a.StartsAt)
		if w := e.ledger.Unwritten(id); w != nil {
			deps = append(deps, w) // a retry: answered once that is written
		}
		existing := get(id)
		if a.Status == "resolved" {
			switch {
			case existing == nil:
				r := &reclaim.Reclaim{ID: id, Fingerprint: fp, StartsAt: a.StartsAt, Labels: a.Labels, Target: t, State: reclaim.Resolved, Reason: "resolved before it was seen firing", Created: now, Closed: now}
				put(r)
				count(reclaim.DecisionResolvedFirst)
			case existing.State == reclaim.Pending || existing.State == reclaim.Snoozed:
				c, evs := transition(existing, Verdict{Do: DoCancel, Why: "the alert resolved: the GPU is busy again or was released", By: "alertmanager"}, now)
				put(c)
				events = append(events, evs...)
				res.Cancelled++
				count(reclaim.DecisionCancelled)
			default:
				res.Duplicate++
			}
			continue
		}
		if existing != nil && existing.State == reclaim.NotReleased {
			// Still firing after a stop its controller refused or ignored:
			// not a repeat of a reclaim that freed the GPU.
			count(reclaim.DecisionNotReleased)
			continue
		}
		if existing != nil {
			res.Duplicate++
			count(reclaim.DecisionDuplicate)
			continue
		}
		if a.StartsAt.Before(latestOf(fp)) {
			// An older episode delivered after a newer one (an HA pair, a
			// retry): the newer one already speaks for the alert.
			res.Ignored++
			count(reclaim.DecisionStale)
			continue
		}
		if otherOpen(t.Key(), fp) {
			// Another alert (other labels, the same unit and holder) has
			// the unit's reclaim open: one warning per unit.
			res.Duplicate++
			count(reclaim.DecisionDuplicate)
			continue
		}
		latest[fp] = a.StartsAt
		// A new episode of an alert supersedes the last one's pending reclaim.
		for _, oldID := range e.sortedIDs(fp) {
			if was, _ := e.ledger.Get(oldID); was.State != reclaim.Pending {
				continue // the index as it was: only what was pending then
			}
			old := get(oldID)
			if old.State == reclaim.Pending && old.StartsAt.Before(a.StartsAt) {
				c, evs := transition(old, Verdict{Do: DoCancel, Why: "superseded by a new episode of the alert", By: "alertmanager"}, now)
				c.Final.Sent = true // the new episode's warning says it all
				put(c)
				events = append(events, evs...)
			}
		}
		r := &reclaim.Reclaim{ID: id, Fingerprint: fp, StartsAt: a.StartsAt, Labels: a.Labels, Annotations: a.Annotations, Target: t, Created: now}
		p := matchPolicy(e.o.Config.Policies, a.Labels)
		if p != nil {
			r.Policy, r.Action, r.DryRun = p.Name, actionFor(e.o.Config, p, t), e.o.Config.DryRun || p.DryRun
		}
		v := decide(r, p, e.o.Config, Facts{Now: now})
		count(v.Decision)
		// A new record is this notification's own: arrive, the first
		// step of transition, completes it in place, with no copy.
		r, evs := arrive(r, v, now)
		if r == nil {
			panic(fmt.Sprintf("decide gave a new episode no first verdict: %+v", v))
		}
		put(r)
		if p == nil {
			res.Ignored++
			continue
		}
		if !r.State.Terminal() {
			open[t.Key()] = fp
		}
		events = append(events, evs...)
		res.New++
	}
	if len(changed) == 0 {
		return res, deps
	}
	rs := make([]*reclaim.Reclaim, 0, len(changed))
	for _, r := range changed {
		rs = append(rs, r)
	}
	deps = append(deps, e.ledger.Queue(rs, events))
	e.gauges()
	return res, deps
}

// sortedIDs lists an alert's reclaims in id order; the caller holds e.mu.
func (e *Engine) sortedIDs(fp string) []string {
	ids := slices.Clone(e.ledger.ByAlert(fp))
	slices.Sort(ids)
	return ids
}
