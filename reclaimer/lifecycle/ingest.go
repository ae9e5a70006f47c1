package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// IngestResult says what a notification changed. Journaled counts the
// alerts of a notification put in the journal to be decided after the
// answer.
type IngestResult struct {
	New, Duplicate, Cancelled, Ignored, Journaled int
}

// JournalFirst is the size of notification that is put in the store's
// journal and answered before it is decided: deciding 20,000 alerts takes
// about as long as webhook.answer_within's second.
const JournalFirst = 20000

// IngestNotification decides on the alerts of one Alertmanager
// notification. When it returns nil every decision is in the store, or the
// notification is in the store's journal and its decisions are still being
// made or written (writes.go); an error means the notification should be
// retried: the retry waits for what this one began to write.
func (e *Engine) IngestNotification(n *notification.Notification) (IngestResult, error) {
	arrived := n.Received
	if arrived.IsZero() {
		arrived = time.Now()
	}
	if err := e.fenced(reclaim.FencedWrite); err != nil {
		return IngestResult{}, err
	}
	if j := e.o.Journal; j != nil && len(n.Alerts) > JournalFirst {
		return e.journalThenDecide(j, n)
	}
	e.mu.Lock()
	res, deps := e.ingest(n.Alerts)
	e.mu.Unlock()
	return res, e.await(deps, n, arrived)
}

// journalThenDecide puts a large notification in the journal, then
// decides it in the background as a replay does, one at a time, and
// retires the entry once its decisions are written. A replica that stops,
// or stops leading, before then leaves the entry to the next start or
// leader.
func (e *Engine) journalThenDecide(j reclaim.Journal, n *notification.Notification) (IngestResult, error) {
	e.decideTurn <- struct{}{}
	body, err := n.Body()
	if err != nil {
		<-e.decideTurn
		return IngestResult{}, fmt.Errorf("encoding the notification for the journal: %w", err)
	}
	id, err := j.Journal(body)
	if err != nil {
		<-e.decideTurn
		e.o.Metrics.Error(reclaim.ComponentStore)
		return IngestResult{}, fmt.Errorf("recording the notification in the journal: %w", err)
	}
	e.o.Failpoint("journaled")
	e.deciding.Add(1)
	alerts := n.Alerts // not n: its body (46 MB for 100,000 alerts) can go
	go func() {
		defer func() { <-e.decideTurn; e.deciding.Done() }()
		// Newest episode first across the whole notification, as ingest
		// orders one part; each part then finds the parts before it in
		// the index, and is decided as if they came in one.
		slices.SortStableFunc(alerts, newestFirst)
		var res IngestResult
		var ws []*pendingWrite
		for part := range slices.Chunk(alerts, decidePart) {
			if err := e.fenced(reclaim.FencedWrite); err != nil {
				// What was decided is written or refused; the entry stays,
				// and the next leader decides the rest.
				e.o.Logger.Warn("a journaled notification is left to the next leader", "entry", id, "decided", res.New, "err", err)
				return
			}
			e.mu.Lock()
			r, w := e.ingest(part)
			e.mu.Unlock()
			res.add(r)
			ws = append(ws, w...)
		}
		e.o.Logger.Info("decided a notification answered from the journal", "entry", id, "alerts", len(alerts), "new", res.New)
		e.retireWhenWritten(ws, id)
	}()
	return IngestResult{Journaled: len(n.Alerts)}, nil
}

// decidePart is how many alerts of a journaled notification are decided
// under the engine's lock at once: what one part holds while it is decided
// and written (its maps, its audit events) is a twentieth of what 100,000
// alerts would, and a webhook or a read waits for one part, not all.
const decidePart = 5000

func newestFirst(a, b notification.Alert) int { return b.StartsAt.Compare(a.StartsAt) }

func (r *IngestResult) add(o IngestResult) {
	r.New += o.New
	r.Duplicate += o.Duplicate
	r.Cancelled += o.Cancelled
	r.Ignored += o.Ignored
	r.Journaled += o.Journaled
}

// Ingest decides on alerts as IngestNotification does, for callers that
// build them (the backtest, tests).
func (e *Engine) Ingest(alerts []notification.Alert) (IngestResult, error) {
	return e.IngestNotification(&notification.Notification{Alerts: alerts, Version: "4"})
}

// ingest decides and queues the writes; it returns the writes the answer
// waits for. The caller holds e.mu.
func (e *Engine) ingest(alerts []notification.Alert) (IngestResult, []*pendingWrite) {
	var res IngestResult
	now := e.now()
	var deps []*pendingWrite

	// Sized for the notification: growing them cost a tenth of the time
	// of one of 100,000 alerts.
	changed := make(map[string]*reclaim.Reclaim, len(alerts))
	var events []reclaim.Event
	get := func(id string) *reclaim.Reclaim {
		if r, ok := changed[id]; ok {
			return r
		}
		return e.ledger.index[id]
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
		for _, id := range e.ledger.byAlert[fp] {
			if s := e.ledger.index[id].StartsAt; s.After(t) {
				t = s
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
		for _, id := range e.ledger.openUnit[k] {
			if e.ledger.index[id].Fingerprint != fp {
				return true
			}
		}
		return false
	}
	// Newest episode first: an older one in the same notification is then
	// stale, and never warned only to be cancelled.
	if !slices.IsSortedFunc(alerts, newestFirst) {
		alerts = slices.Clone(alerts)
		slices.SortStableFunc(alerts, newestFirst)
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
		if w := e.ledger.unwritten[id]; w != nil {
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
			if e.ledger.index[oldID].State != reclaim.Pending {
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
	deps = append(deps, e.queueWrite(rs, events))
	e.ledger.version++
	e.gauges()
	return res, deps
}

// sortedIDs lists an alert's reclaims in id order; the caller holds e.mu.
func (e *Engine) sortedIDs(fp string) []string {
	ids := slices.Clone(e.ledger.byAlert[fp])
	slices.Sort(ids)
	return ids
}

// clone deep-copies a reclaim, so the index changes only once a write is durable.
func clone(r *reclaim.Reclaim) *reclaim.Reclaim { return r.Clone() }
