package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/alertmanager"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Engine is what the buttons change.
type Engine interface {
	Get(id string) (*reclaim.Reclaim, bool)
	Snooze(ctx context.Context, id, by string, until time.Time, silence string) (*reclaim.Reclaim, error)
	Keep(ctx context.Context, id, by string, until time.Time, silence string) (*reclaim.Reclaim, error)
	ReleaseNow(ctx context.Context, id, by string) (*reclaim.Reclaim, error)
	Restore(ctx context.Context, id, by string) (*reclaim.Reclaim, error)
}

// Silencer creates Alertmanager silences.
type Silencer interface {
	CreateSilence(ctx context.Context, s alertmanager.Silence) (string, error)
}

// KeepFor bounds a keep: Alertmanager silences need an end. The silence
// matches the pod (or the user and Slurm job), so it stops applying when
// the workload ends; this is the longest it lasts otherwise.
const KeepFor = 30 * 24 * time.Hour

// ReclaimerAudience is the label of the reclaimer's copy of an alert: a
// snooze silences that copy alone.
var ReclaimerAudience = map[string]string{names.LabelAudience: names.AudienceReclaimer}

// Interactions serves POST /slack/interactions: verified button presses
// from the messages, answered at once and carried out after.
type Interactions struct {
	notifier *Notifier
	engine   Engine
	silences Silencer
	admins   []string
	log      *slog.Logger
	clock    func() time.Time

	mu     sync.Mutex // guards locks
	replay ReplayGuard
	locks  map[string]*sync.Mutex
	wg     sync.WaitGroup
	maxAge time.Duration
}

// ReplayGuard remembers signed requests durably: a signature seen before
// and not expired is a replay, after a restart too.
type ReplayGuard interface {
	FirstSight(key string, now, expires time.Time) (bool, error)
}

// NewInteractions returns the handler; replay is the reclaimer's store.
func NewInteractions(n *Notifier, e Engine, s Silencer, replay ReplayGuard) *Interactions {
	return &Interactions{notifier: n, engine: e, silences: s, admins: n.cfg.Admins, log: n.log, clock: n.clock,
		replay: replay, locks: map[string]*sync.Mutex{}, maxAge: 5 * time.Minute}
}

// Wait waits for the presses being carried out (tests, shutdown).
func (h *Interactions) Wait() { h.wg.Wait() }

const maxPayload = 64 << 10

func (h *Interactions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST Slack interactions here", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPayload))
	if err != nil {
		http.Error(w, "payload too large", http.StatusRequestEntityTooLarge)
		return
	}
	sv, err := slack.NewSecretsVerifier(r.Header, h.notifier.cfg.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		h.log.Warn("refused a Slack request", "err", err)
		http.Error(w, "signature verification failed", http.StatusUnauthorized)
		return
	}
	first, err := h.firstSight(r.Header.Get("X-Slack-Signature"))
	switch {
	case err != nil:
		h.log.Error("remembering a Slack request's signature", "err", err)
		http.Error(w, "cannot check for a replay now", http.StatusServiceUnavailable)
		return
	case !first:
		http.Error(w, "replayed request", http.StatusUnauthorized)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "not a form", http.StatusBadRequest)
		return
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
		http.Error(w, "no interaction payload", http.StatusBadRequest)
		return
	}
	if cb.Type != slack.InteractionTypeBlockActions || len(cb.ActionCallback.BlockActions) == 0 {
		w.WriteHeader(http.StatusOK) // nothing of ours
		return
	}
	// Slack wants an answer within 3 seconds; the work happens after.
	w.WriteHeader(http.StatusOK)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h.press(ctx, &cb)
	}()
}

// firstSight remembers a signature for as long as Slack's timestamps are
// valid; a second sight is a replay. The signature is keyed as the hex of
// its MAC in lower case: the same MAC written otherwise is the same request.
func (h *Interactions) firstSight(sig string) (bool, error) {
	key := strings.ToLower(strings.TrimSpace(sig))
	now := time.Now()
	return h.replay.FirstSight("slack:"+key, now, now.Add(2*h.maxAge))
}

func (h *Interactions) lock(id string) func() {
	h.mu.Lock()
	l, ok := h.locks[id]
	if !ok {
		l = &sync.Mutex{}
		h.locks[id] = l
	}
	h.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// ephemeral answers only the presser.
func (h *Interactions) ephemeral(ctx context.Context, cb *slack.InteractionCallback, text string) {
	err := h.notifier.call(ctx, func() error {
		_, err := h.notifier.api.PostEphemeralContext(ctx, cb.Channel.ID, cb.User.ID, slack.MsgOptionText(text, false))
		return err
	})
	if err != nil {
		h.log.Warn("answering a button press", "user", cb.User.ID, "err", err)
	}
}

func (h *Interactions) press(ctx context.Context, cb *slack.InteractionCallback) {
	a := cb.ActionCallback.BlockActions[0]
	id := a.Value
	unlock := h.lock(id) // a double click waits for the first, then finds it done
	defer unlock()
	r, ok := h.engine.Get(id)
	if !ok {
		h.ephemeral(ctx, cb, "This reclaim is not known any more.")
		return
	}
	presser := cb.User.ID
	owner := r.Warning.Refs["slack.owner"]
	if presser == "" || (presser != owner && !slices.Contains(h.admins, presser)) {
		h.log.Warn("refused a button press by someone else", "user", presser, "owner", owner, "reclaim", id, "action", a.ActionID)
		who := "its owner"
		if owner != "" {
			who = fmt.Sprintf("its owner (<@%s>)", owner)
		}
		h.ephemeral(ctx, cb, fmt.Sprintf("Only %s or a gpureclaim admin can do this. Nothing was changed.", who))
		return
	}
	by := fmt.Sprintf("<@%s>", presser)
	now := h.clock()
	var err error
	snooze, isSnooze := h.snoozeFor(a.ActionID)
	switch {
	case isSnooze:
		if !lifecycle.Takes(r, lifecycle.DoSnooze) {
			h.ephemeral(ctx, cb, h.already(r))
			return
		}
		until := now.Add(snooze)
		var sid string
		sid, err = h.silence(ctx, r, cb, now, until, fmt.Sprintf("snoozed from Slack for %s", snooze))
		if err == nil {
			_, err = h.engine.Snooze(ctx, id, by, until, sid)
		}
	case a.ActionID == ActionKeep:
		if !lifecycle.Takes(r, lifecycle.DoKeep) {
			h.ephemeral(ctx, cb, h.already(r))
			return
		}
		until := now.Add(KeepFor)
		var sid string
		sid, err = h.silence(ctx, r, cb, now, until, "kept from Slack until the workload ends")
		if err == nil {
			_, err = h.engine.Keep(ctx, id, by, until, sid)
		}
	case a.ActionID == ActionRelease:
		if !lifecycle.Takes(r, lifecycle.DoReleaseNow) {
			h.ephemeral(ctx, cb, h.already(r))
			return
		}
		_, err = h.engine.ReleaseNow(ctx, id, by)
	case a.ActionID == ActionRestore:
		switch rs := r.Restore; {
		case rs == nil:
		case rs.Failed != "":
			h.ephemeral(ctx, cb, "A restore was asked by "+mention(rs.AskedBy)+" and did not take: "+esc(rs.Failed)+". The admins are told.")
			return
		case !rs.RestoredAt.IsZero():
			h.ephemeral(ctx, cb, "Already restored.")
			return
		default:
			h.ephemeral(ctx, cb, "A restore asked by "+mention(rs.AskedBy)+" is under way: the workload is not running yet.")
			return
		}
		_, err = h.engine.Restore(ctx, id, by)
	default:
		h.ephemeral(ctx, cb, "Unknown button.")
		return
	}
	if err != nil {
		h.log.Error("carrying out a button press", "reclaim", id, "action", a.ActionID, "err", err)
		msg := "That did not work: " + esc(err.Error())
		if errors.Is(err, lifecycle.ErrNotPending) {
			msg = h.already(r)
		}
		h.ephemeral(ctx, cb, msg)
	}
}

// snoozeFor reads a snooze button's duration; only the configured ones count.
func (h *Interactions) snoozeFor(action string) (time.Duration, bool) {
	secs, ok := strings.CutPrefix(action, "snooze_")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(secs)
	if err != nil {
		return 0, false
	}
	d := time.Duration(n) * time.Second
	return d, slices.Contains(h.notifier.snoozes, d)
}

func (h *Interactions) already(r *reclaim.Reclaim) string {
	switch r.State {
	case reclaim.Snoozed:
		if s := r.Snooze; s != nil {
			return fmt.Sprintf("Already snoozed by %s until %s.", mention(s.By), date(s.Until))
		}
		return "Already snoozed."
	case reclaim.Exempt:
		return "Already kept: " + esc(r.Reason) + "."
	}
	return fmt.Sprintf("Nothing to do: the reclaim is %s (%s).", r.State, esc(r.Reason))
}

// silence mutes this target on the reclaimer's copy of the alert only.
func (h *Interactions) silence(ctx context.Context, r *reclaim.Reclaim, cb *slack.InteractionCallback, start, end time.Time, what string) (string, error) {
	name := cb.User.Name
	if name == "" {
		name = cb.User.ID
	}
	return h.silences.CreateSilence(ctx, alertmanager.Silence{
		Target:    r.Target,
		Receiver:  ReclaimerAudience,
		CreatedBy: fmt.Sprintf("%s (Slack %s)", name, cb.User.ID),
		Comment:   fmt.Sprintf("gpureclaim: %s; reclaim %s; Slack message %s/%s", what, r.ID, cb.Channel.ID, cb.Message.Timestamp),
		Start:     start,
		End:       end,
	})
}
