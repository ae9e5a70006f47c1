package slack_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	goslack "github.com/slack-go/slack"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeslack"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/reclaimer/alertmanager"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	rslack "github.com/gpureclaim/gpureclaim/reclaimer/slack"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const secret = "t0ken" // reclaimtest.Config's secret file, used as the signing secret

// owners answers the pod-annotation lookups.
type owners map[string]string

func (o owners) Owner(_ context.Context, t reclaim.Target) (string, error) { return o[t.Holder()], nil }

type env struct {
	t        testing.TB
	base     time.Time
	slack    *fakeslack.Server
	cfg      *config.Config
	clock    *fakeclock.Clock
	actor    *reclaimtest.Actor
	notifier *rslack.Notifier
	inter    *rslack.Interactions
	eng      *lifecycle.Engine
	srv      *httptest.Server
	am       *amtest.Alertmanager
	amc      *alertmanager.Client
	st       *store.Bolt
}

// newEnv runs an engine with the Slack notifier on a fake Slack. With a
// real Alertmanager the silences are real; otherwise checks use checker.
func newEnv(t testing.TB, slackYAML string, own owners, withAM bool, checker reclaim.AlertChecker) *env {
	e := &env{t: t, slack: fakeslack.New(t), clock: reclaimtest.NewClock(), actor: &reclaimtest.Actor{}, base: reclaimtest.T0}
	amURL := "http://127.0.0.1:1"
	if withAM {
		e.am = amtest.Start(t, amtest.Config("http://127.0.0.1:1/unused", "x", time.Hour))
		amURL = e.am.URL
	}
	e.cfg = reclaimtest.Config(t, fmt.Sprintf(`alertmanager: {url: %q}
status_page_url: https://reclaimer.example.com
notifiers:
  - type: slack
    slack:
      token_file: token
      signing_secret_file: token
      api_url: %q
      admins: [U0ADMIN]
      max_requests_per_minute: 60000
%s
policies:
  - {name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 5m}
  - {name: notify, matchers: ['alertname=~"GPUWasted|GPUOvercommitted|MIGInstanceOversized"'], action: notify}
`, amURL, e.slack.GetAPIURL(), indent(slackYAML)))
	sc := e.cfg.Notifiers[0].Slack
	e.notifier = rslack.New(rslack.Options{Config: sc, Owners: own, Clock: e.clock.Now, Pricing: rslack.Pricing{PerGPUHour: 2.5, Currency: "USD"}, StatusPage: e.cfg.StatusPageURL})
	rslack.SetSleep(e.notifier, func(context.Context, time.Duration) error { return nil })
	var err error
	e.amc, err = alertmanager.New(e.cfg.Alertmanager)
	require.NoError(t, err)
	if checker == nil {
		checker = e.amc
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "s.db"), time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	e.eng, err = lifecycle.New(lifecycle.Options{Config: e.cfg, Store: st, Journal: st, Checker: checker, Actor: e.actor, Planner: e.actor, Restorer: e.actor,
		Notifiers: []reclaim.Notifier{e.notifier}, Clock: e.clock.Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())})
	require.NoError(t, err)
	e.st = st
	e.inter = rslack.NewInteractions(e.notifier, e.eng, e.amc, st)
	e.srv = httptest.NewServer(e.inter)
	t.Cleanup(e.srv.Close)
	return e
}

func indent(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, "      "+l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

func (e *env) at(d time.Duration) {
	e.clock.Set(e.base.Add(d))
	e.eng.Step(context.Background())
}

func (e *env) ingest(a ...notification.Alert) {
	_, err := e.eng.Ingest(a)
	require.NoError(e.t, err)
}

func (e *env) only() *reclaim.Reclaim {
	rs := e.eng.List()
	require.Len(e.t, rs, 1)
	return rs[0]
}

// press sends a signed button press, as Slack does.
func (e *env) press(user, action, id string) int {
	return e.pressSigned(user, action, id, time.Now(), secret)
}

func (e *env) pressSigned(user, action, id string, at time.Time, key string) int {
	code, _ := e.pressRaw(payload(user, action, id), at, key, "")
	return code
}

func payload(user, action, id string) string {
	p, _ := json.Marshal(map[string]any{
		"type":    "block_actions",
		"user":    map[string]string{"id": user, "name": strings.ToLower(strings.TrimPrefix(user, "U0"))},
		"channel": map[string]string{"id": "D" + strings.TrimPrefix(user, "U")},
		"message": map[string]string{"ts": "1772445600.000001"},
		"actions": []map[string]string{{"action_id": action, "block_id": "gpureclaim", "value": id, "type": "button",
			"action_ts": fmt.Sprintf("%d.%06d", time.Now().Unix(), time.Now().Nanosecond()/1000)}}, // every press is its own request
	})
	return "payload=" + url.QueryEscape(string(p))
}

func (e *env) pressRaw(body string, at time.Time, key, reuseSig string) (int, string) {
	ts := fmt.Sprint(at.Unix())
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("v0:" + ts + ":" + body))
	sig := "v0=" + hex.EncodeToString(mac.Sum(nil))
	if reuseSig != "" {
		sig = reuseSig
	}
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", ts)
	req.Header.Set("X-Slack-Signature", sig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	resp.Body.Close()
	e.inter.Wait()
	return resp.StatusCode, sig
}

func golden(t *testing.T, name string, blocks []goslack.Block) {
	got, err := json.MarshalIndent(goslack.Blocks{BlockSet: blocks}, "", "  ")
	require.NoError(t, err)
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, append(got, '\n'), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "run go test ./reclaimer/slack -update and review the diff")
}

func sample() *reclaim.Reclaim {
	return &reclaim.Reclaim{
		ID: "5e8f0a8f0c0b2a11-1772445600", Policy: "idle", Action: "evict",
		StartsAt: reclaimtest.T0, ActAt: reclaimtest.T0.Add(5 * time.Minute),
		Annotations: labels.FromStrings("idle_for", "10m", "dashboard_url", "http://grafana.example.com/d/gpureclaim-node/gpureclaim-node-and-gpu?var-node=gpu-node-1&var-uuid=GPU-7495",
			"description", "The GPU GPU-7495 on gpu-node-1 held by pod serving/chat-api-x2x7p averaged 8% sm_active over 30m while holding 92.5% of its memory."),
		Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-7495", Node: "gpu-node-1", Kind: "gpu", Namespace: "data-science", Pod: "notebook-carol"},
	}
}

func TestMessagesGolden(t *testing.T) {
	p := rslack.Pricing{PerGPUHour: 2.5, Currency: "USD"}
	page := "https://reclaimer.example.com"
	r := sample()
	golden(t, "warning.json", rslack.Warning(r, reclaimtest.T0, p, page, rslack.DefaultSnoozes))

	mig := sample()
	mig.Target.Kind, mig.Target.MIGProfile, mig.Target.UUID, mig.Action = "mig", "1g.10gb", "MIG-1e50", "kill"
	mig.Target.Pod, mig.Target.Namespace, mig.Target.User, mig.Target.SlurmJob = "", "", "bob", "4242"
	golden(t, "warning-mig-slurm.json", rslack.Warning(mig, reclaimtest.T0, p, page, []time.Duration{30 * time.Minute, 8 * time.Second}))

	wasted := sample()
	wasted.Target.Alertname = "GPUWasted"
	golden(t, "notice.json", rslack.Notice(wasted, reclaimtest.T0, p, page))

	snoozed := sample()
	snoozed.Snooze = &reclaim.Snooze{By: "<@U0CAROL>", Until: reclaimtest.T0.Add(time.Hour)}
	golden(t, "snoozed.json", rslack.Outcome(reclaim.MsgSnoozed, snoozed, "<@U0CAROL>", reclaimtest.T0, p, page))

	scaled := sample()
	scaled.Action, scaled.ActedAt, scaled.Detail = "scale_down", reclaimtest.T0.Add(5*time.Minute), "Deployment serving/chat-api scaled from 3 to 0 replicas"
	scaled.Stopped = &reclaim.Stopped{Kind: "Deployment", Namespace: "serving", Name: "chat-api", PreviousReplicas: 3}
	golden(t, "reclaimed-scale-down.json", rslack.Outcome(reclaim.MsgReclaimed, scaled, "", reclaimtest.T0.Add(5*time.Minute), p, page))

	job := sample()
	job.Action = "stop"
	job.TopOwner = &reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train-7", Stop: reclaim.StopPatch, Stopped: "suspended"}
	golden(t, "warning-job.json", rslack.Warning(job, reclaimtest.T0, p, page, rslack.DefaultSnoozes))
	job.ActedAt, job.Detail = reclaimtest.T0.Add(15*time.Minute), "Job ml/train-7 suspended"
	job.Stopped = &reclaim.Stopped{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train-7", Stop: reclaim.StopPatch, StopVerb: "suspended", RestoreVerb: "resumed"}
	golden(t, "reclaimed-job.json", rslack.Outcome(reclaim.MsgReclaimed, job, "", reclaimtest.T0.Add(15*time.Minute), p, page))
	job.Restore = &reclaim.Restore{AskedAt: reclaimtest.T0.Add(16 * time.Minute), AskedBy: "<@U0CAROL>", RestoredAt: reclaimtest.T0.Add(20 * time.Minute)}
	golden(t, "restored-job.json", rslack.Outcome(reclaim.MsgRestored, job, "<@U0CAROL>", reclaimtest.T0.Add(20*time.Minute), p, page))

	unknown := sample()
	unknown.State, unknown.Reason = reclaim.Notified, "the pod is owned by TrainingRun ml/run-1, which gpureclaim cannot stop; declare it under `workloads:`"
	unknown.TopOwner = &reclaim.TopOwner{Kind: "TrainingRun", Namespace: "ml", Name: "run-1", Stop: reclaim.StopNone, Why: unknown.Reason}
	golden(t, "notice-unknown-owner.json", rslack.Notice(unknown, reclaimtest.T0, p, page))

	held := sample()
	held.Action, held.State, held.ActedAt = "stop", reclaim.NotReleased, reclaimtest.T0.Add(5*time.Minute)
	held.Reason = "InferenceService ml/chat stopped, but 5m0s later the GPU is still held: held by pod ml/chat-predictor-7d9c (Running); <!here> KServe reports on InferenceService ml/chat: Ready (Ready)"
	golden(t, "not-released.json", rslack.Outcome(reclaim.MsgNotReleased, held, "", reclaimtest.T0.Add(10*time.Minute), p, page))

	job.Restore.RestoredAt, job.Restore.Failed = time.Time{}, "Job ml/train-7 was asked to run again 5m0s ago and does not: no pod of Job ml/train-7 runs"
	golden(t, "restore-failed-job.json", rslack.Outcome(reclaim.MsgRestoreFailed, job, "<@U0CAROL>", reclaimtest.T0.Add(25*time.Minute), p, page))

	cancelled := sample()
	cancelled.Reason = "the alert no longer fires: the GPU is busy again or was released"
	golden(t, "cancelled.json", rslack.Outcome(reclaim.MsgCancelled, cancelled, "", reclaimtest.T0.Add(3*time.Minute), p, page))
}

func TestRouting(t *testing.T) {
	for _, tc := range []struct {
		name     string
		slack    string
		owners   owners
		emails   map[string]string
		alert    notification.Alert
		channels []string // where the warning was posted
		err      string
	}{
		{name: "pod owner by Slack id: a DM", owners: owners{"ml/nb-0": "U0CAROL"}, alert: reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), channels: []string{"D0CAROL"}},
		{name: "pod owner by e-mail: looked up, a DM", owners: owners{"ml/nb-0": "carol@example.com"}, emails: map[string]string{"carol@example.com": "U0CAROL"},
			alert: reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), channels: []string{"D0CAROL"}},
		{name: "owner and namespace channel", slack: "namespace_channels: {ml: \"#ml-gpus\"}", owners: owners{"ml/nb-0": "U0CAROL"},
			alert: reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), channels: []string{"D0CAROL", "#ml-gpus"}},
		{name: "unknown e-mail: the namespace channel", slack: "namespace_channels: {ml: \"#ml-gpus\"}", owners: owners{"ml/nb-0": "ghost@example.com"},
			alert: reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), channels: []string{"#ml-gpus"}},
		{name: "no owner: the default channel", slack: "default_channel: \"#gpu-reclaim\"", alert: reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), channels: []string{"#gpu-reclaim"}},
		{name: "bare-metal user by map", slack: "users: {bob: U0BOB}", alert: reclaimtest.IdleProcess("firing", reclaimtest.T0, "bob"), channels: []string{"D0BOB"}},
		{name: "bare-metal user by e-mail domain", slack: "email_domain: example.com", emails: map[string]string{"bob@example.com": "U0BOB"},
			alert: reclaimtest.IdleProcess("firing", reclaimtest.T0, "bob"), channels: []string{"D0BOB"}},
		{name: "nobody to tell", alert: reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), err: "no Slack user or channel for ml/nb-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.slack, tc.owners, false, &reclaimtest.Checker{})
			for k, v := range tc.emails {
				e.slack.AddUser(k, v)
			}
			e.ingest(tc.alert)
			e.at(0)
			var got []string
			for _, p := range e.slack.Posts() {
				got = append(got, p.Channel)
			}
			require.ElementsMatch(t, tc.channels, got)
			r := e.only()
			if tc.err != "" {
				require.False(t, r.Warning.Sent)
				require.Contains(t, r.Warning.Error, tc.err)
				e.at(10 * time.Minute)
				require.Zero(t, e.actor.Count(), "nothing is reclaimed before the owner is told")
				return
			}
			require.True(t, r.Warning.Sent)
		})
	}
}

func silences(t *testing.T, am *amtest.Alertmanager) []map[string]any {
	resp, err := http.Get(am.URL + "/api/v2/silences")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out []map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out
}

// matchers of a silence, as name=value.
func matchers(s map[string]any) []string {
	var out []string
	for _, m := range s["matchers"].([]any) {
		m := m.(map[string]any)
		require.Equal(nil, false, m["isRegex"])
		out = append(out, fmt.Sprintf("%s=%s", m["name"], m["value"]))
	}
	return out
}

func TestButtonsAgainstARealAlertmanager(t *testing.T) {
	e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL", "ml/nb-1": "U0CAROL", "ml/nb-2": "U0CAROL"}, true, nil)
	// Silences live in Alertmanager's time: run on the wall clock.
	e.base = time.Now().Truncate(time.Second)
	e.clock.Set(e.base)
	alert := func(pod string) notification.Alert {
		a := reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", pod, "audience", "reclaimer")
		a.Fingerprint = model.Fingerprint(model.LabelsToSignature(a.Labels.Map())).String()
		a.StartsAt = time.Now().Add(-15 * time.Minute).Truncate(time.Second).UTC()
		e.am.Push(t, amtest.Alert{Labels: a.Labels.Map(), StartsAt: a.StartsAt})
		return a
	}
	e.ingest(alert("nb-0"), alert("nb-1"), alert("nb-2"))
	e.at(0)
	ids := map[string]string{}
	for _, r := range e.eng.List() {
		ids[r.Target.Pod] = r.ID
		require.True(t, r.Warning.Sent)
		require.Equal(t, "U0CAROL", r.Warning.Refs["slack.owner"])
	}

	t.Run("someone else's click is refused and changes nothing", func(t *testing.T) {
		require.Equal(t, http.StatusOK, e.press("U0MALLORY", rslack.ActionSnooze1h, ids["nb-0"]))
		eph := e.slack.Ephemerals()
		require.Len(t, eph, 1)
		require.Equal(t, "U0MALLORY", eph[0].User)
		require.Contains(t, eph[0].Text, "Only its owner (<@U0CAROL>) or a gpureclaim admin can do this")
		require.Empty(t, silences(t, e.am))
	})

	t.Run("snooze: a silence on this target, on the reclaimer's copy, for an hour", func(t *testing.T) {
		before := time.Now()
		require.Equal(t, http.StatusOK, e.press("U0CAROL", rslack.ActionSnooze1h, ids["nb-0"]))
		ss := silences(t, e.am)
		require.Len(t, ss, 1)
		require.ElementsMatch(t, []string{"alertname=GPUIdle", "uuid=GPU-nb-0", "namespace=ml", "pod=nb-0", "audience=reclaimer"}, matchers(ss[0]))
		require.Equal(t, "carol (Slack U0CAROL)", ss[0]["createdBy"])
		require.Contains(t, ss[0]["comment"], "snoozed from Slack for 1h0m0s")
		end, err := time.Parse(time.RFC3339, ss[0]["endsAt"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, before.Add(time.Hour), end, 5*time.Second)

		r, _ := e.eng.Get(ids["nb-0"])
		require.Equal(t, reclaim.Snoozed, r.State)
		require.Equal(t, "<@U0CAROL>", r.Snooze.By)
		ups := e.slack.Updates()
		require.Len(t, ups, 1)
		require.Equal(t, "D0CAROL", ups[0].Channel)
		require.Equal(t, "Snoozed", fakeslack.Header(ups[0]))

		// A double click: no second silence, an answer instead.
		require.Equal(t, http.StatusOK, e.press("U0CAROL", rslack.ActionSnooze1h, ids["nb-0"]))
		require.Len(t, silences(t, e.am), 1)
		require.Contains(t, e.slack.Ephemerals()[1].Text, "Already snoozed by <@U0CAROL>")
	})

	t.Run("keep: a silence until the workload ends", func(t *testing.T) {
		require.Equal(t, http.StatusOK, e.press("U0CAROL", rslack.ActionKeep, ids["nb-1"]))
		r, _ := e.eng.Get(ids["nb-1"])
		require.Equal(t, reclaim.Exempt, r.State)
		require.Equal(t, "kept by <@U0CAROL>", r.Reason)
		var keep map[string]any
		for _, s := range silences(t, e.am) {
			if strings.Contains(s["comment"].(string), "kept") {
				keep = s
			}
		}
		require.NotNil(t, keep)
		require.Contains(t, matchers(keep), "pod=nb-1", "it matches the pod: a new pod of the workload is not kept")
		end, _ := time.Parse(time.RFC3339, keep["endsAt"].(string))
		require.WithinDuration(t, time.Now().Add(rslack.KeepFor), end, time.Minute)
		require.Equal(t, "Kept", fakeslack.Header(e.slack.Updates()[len(e.slack.Updates())-1]))
	})

	t.Run("release now acts at once", func(t *testing.T) {
		require.Equal(t, http.StatusOK, e.press("U0ADMIN", rslack.ActionRelease, ids["nb-2"]))
		e.at(time.Second)
		require.Equal(t, []string{"evict ml/nb-2"}, e.actor.Calls, "before the grace ends; an admin may release too")
		e.at(2 * time.Second)
		r, _ := e.eng.Get(ids["nb-2"])
		require.Equal(t, reclaim.Done, r.State)
		var story []string
		for _, u := range e.slack.Updates() {
			if u.Text != "" && strings.Contains(u.Text, "nb-2") || strings.Contains(string(u.Blocks), "nb-2") {
				story = append(story, fakeslack.Header(u))
			}
		}
		require.Equal(t, []string{"Released", "Reclaimed"}, story)
	})

	t.Run("the grace passes: the snoozed and the kept are spared", func(t *testing.T) {
		e.at(10 * time.Minute)
		require.Equal(t, []string{"evict ml/nb-2"}, e.actor.Calls)
	})
}

func TestSignatures(t *testing.T) {
	e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
	e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	e.at(0)
	id := e.only().ID
	body := payload("U0CAROL", rslack.ActionSnooze1h, "not-a-reclaim")

	now := time.Now()
	code, sig := e.pressRaw(body, now, secret, "")
	require.Equal(t, http.StatusOK, code, "valid")
	code, _ = e.pressRaw(body, now, secret, sig)
	require.Equal(t, http.StatusUnauthorized, code, "replayed")
	code, _ = e.pressRaw(body, now, secret, "v0="+strings.ToUpper(strings.TrimPrefix(sig, "v0=")))
	require.Equal(t, http.StatusUnauthorized, code, "replayed with the MAC in upper case")
	// Restarted, the reclaimer still knows the signature: it is in the store.
	e.inter = rslack.NewInteractions(e.notifier, e.eng, e.amc, e.st)
	e.srv.Config.Handler = e.inter
	code, _ = e.pressRaw(body, now, secret, sig)
	require.Equal(t, http.StatusUnauthorized, code, "replayed after a restart")
	require.Equal(t, http.StatusUnauthorized, e.pressSigned("U0CAROL", rslack.ActionSnooze1h, id, time.Now(), "guessed-secret"), "forged")
	require.Equal(t, http.StatusUnauthorized, e.pressSigned("U0CAROL", rslack.ActionSnooze1h, id, time.Now().Add(-10*time.Minute), secret), "stale")
	require.Equal(t, reclaim.Pending, e.only().State, "no refused request changed anything")

	resp, err := http.Post(e.srv.URL, "application/x-www-form-urlencoded", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "unsigned")
}

func TestSlackFailures(t *testing.T) {
	t.Run("500, then delivered", func(t *testing.T) {
		e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
		e.slack.FailPosts("", 500, 502)
		var waits []time.Duration
		rslack.SetSleep(e.notifier, func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil })
		e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		e.at(0)
		require.True(t, e.only().Warning.Sent)
		require.Equal(t, 3, e.slack.Calls("chat.postMessage"))
		require.Equal(t, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}, waits, "backoff")
	})
	t.Run("429 honours Retry-After", func(t *testing.T) {
		e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
		e.slack.FailPosts("7", 429)
		var waits []time.Duration
		rslack.SetSleep(e.notifier, func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil })
		e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		e.at(0)
		require.True(t, e.only().Warning.Sent)
		require.Equal(t, []time.Duration{7 * time.Second}, waits)
	})
	t.Run("three 429s: the grace runs from delivery, and the warning says so", func(t *testing.T) {
		e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
		e.slack.FailPosts("12", 429, 429, 429)
		rslack.SetSleep(e.notifier, func(_ context.Context, d time.Duration) error { e.clock.Advance(d); return nil })
		e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		e.at(0)
		r := e.only()
		require.Equal(t, reclaimtest.T0.Add(36*time.Second), r.Warning.At)
		require.Equal(t, reclaimtest.T0.Add(36*time.Second+5*time.Minute), r.ActAt)
		require.Len(t, e.slack.Posts(), 1)
		ups := e.slack.Updates()
		require.Len(t, ups, 1, "the warning updated in place")
		require.Contains(t, ups[0].Text, reclaimtest.T0.Add(36*time.Second+5*time.Minute).Format(time.RFC3339))
		e.at(5*time.Minute + 35*time.Second)
		require.Zero(t, e.actor.Count(), "not at the time first stated")
		e.at(5*time.Minute + 36*time.Second)
		require.Equal(t, 1, e.actor.Count())
	})
	t.Run("down for good: the reclaim waits and the admins hear of it", func(t *testing.T) {
		e := newEnv(t, "admin_channel: C0ADMIN", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
		e.slack.DMsDown(true)
		e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		for m := 0; m <= 20; m++ {
			e.at(time.Duration(m) * time.Minute)
		}
		require.Zero(t, e.actor.Count())
		r := e.only()
		require.False(t, r.Warning.Sent)
		require.Contains(t, r.Reason, "the owner's warning is not delivered yet")
		var admin []string
		for _, p := range e.slack.Posts() {
			if p.Channel == "C0ADMIN" {
				admin = append(admin, p.Text)
			}
		}
		require.Len(t, admin, 1)
		require.Contains(t, admin[0], "has not been delivered for 15m", "told once the warning deadline passed")
		require.True(t, r.Warning.Escalated)
	})
}

func TestRateLimiterFollowsTheConfig(t *testing.T) {
	e := newEnv(t, "", nil, false, &reclaimtest.Checker{})
	sc := *e.cfg.Notifiers[0].Slack
	sc.MaxRequestsPerMinute = 50
	n := rslack.New(rslack.Options{Config: &sc, Clock: time.Now})
	every, burst := rslack.Limits(n)
	require.Equal(t, 1200*time.Millisecond, every, "Slack's tier 3: 50 a minute")
	require.Equal(t, 5, burst)
}

// warned → snoozed → the silence expires → warned again → reclaimed, with the
// message updated at every step, on a fake clock.
func TestFullCycle(t *testing.T) {
	checker := &reclaimtest.Checker{}
	e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, checker)
	e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	e.at(0)
	require.Len(t, e.slack.Posts(), 1)
	id := e.only().ID

	// The button path needs a silence; the checker stands in for Alertmanager.
	_, err := e.eng.Snooze(context.Background(), id, "<@U0CAROL>", reclaimtest.T0.Add(time.Hour), "sil-1")
	require.NoError(t, err)
	checker.Set(reclaim.AlertSilenced, "carol until +1h", reclaimtest.T0.Add(time.Hour))
	e.at(30 * time.Minute)
	require.Zero(t, e.actor.Count())

	checker.Set(reclaim.AlertActive, "", time.Time{})
	e.at(time.Hour)
	e.at(time.Hour + time.Second)
	require.Len(t, e.slack.Posts(), 2, "warned again")
	e.at(time.Hour + 5*time.Minute + time.Second) // the grace runs from the second warning
	e.at(time.Hour + 5*time.Minute + 2*time.Second)
	require.Equal(t, 1, e.actor.Count())

	var story []string
	for _, p := range e.slack.Posts() {
		story = append(story, "post: "+fakeslack.Header(p))
	}
	for _, u := range e.slack.Updates() {
		story = append(story, "update: "+fakeslack.Header(u))
	}
	require.Equal(t, []string{"post: Idle GPU: it will be reclaimed", "post: Idle GPU: it will be reclaimed", "update: Snoozed", "update: Reclaimed"}, story)
	require.Equal(t, reclaim.Done, e.only().State)
}

// What an alert, a reason or a label carries is text, never a mention, a
// link or markup; a dashboard link that is not http(s) is left out.
func TestMessagesEscapeWhatTheyQuote(t *testing.T) {
	p := rslack.Pricing{PerGPUHour: 2.5, Currency: "USD"}
	r := sample()
	r.Annotations = labels.NewBuilder(r.Annotations).Set("description", "<!channel> idle; see <https://evil.example.com|the fix> & more").
		Set("dashboard_url", "javascript:alert(1)").Labels()
	r.Reason = "<!here> cannot stop it"
	r.TopOwner = &reclaim.TopOwner{Kind: "TrainingRun", Namespace: "x", Name: "<@U0ADMIN>", Stop: reclaim.StopNone}
	r.Action = "stop"
	for name, blocks := range map[string][]goslack.Block{
		"warning": rslack.Warning(r, reclaimtest.T0, p, "javascript:void(0)", rslack.DefaultSnoozes),
		"notice":  rslack.Notice(r, reclaimtest.T0, p, ""),
		"failed":  rslack.Outcome(reclaim.MsgFailed, r, "", reclaimtest.T0, p, ""),
	} {
		b, err := json.Marshal(goslack.Blocks{BlockSet: blocks})
		require.NoError(t, err)
		var round []map[string]any
		require.NoError(t, json.Unmarshal(b, &round))
		text := string(b)
		for _, bad := range []string{"<!channel>", "<!here>", "<https://evil", "<@U0ADMIN>", "javascript:"} {
			require.NotContains(t, strings.ReplaceAll(text, `\u003c`, "<"), bad, "%s", name)
		}
	}
}

// The fallback text (notifications, screen readers) is escaped as the
// blocks are: a description cannot ping a channel or link elsewhere.
func TestFallbackTextEscapesWhatItQuotes(t *testing.T) {
	e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
	a := reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0", "alertname", "GPUWasted")
	a.Annotations = labels.NewBuilder(a.Annotations).Set("description", "<!here> see <https://evil.example.com|the fix> <@U0ADMIN>").Labels()
	e.ingest(a)
	e.at(0)
	posts := e.slack.Posts()
	require.NotEmpty(t, posts)
	require.Contains(t, posts[0].Text, "see &lt;https://evil.example.com|the fix&gt;", "the notice quotes the description")
	for _, p := range posts {
		for _, bad := range []string{"<!here>", "<https://evil", "<@U0ADMIN>"} {
			require.NotContains(t, p.Text, bad)
		}
	}
}

// A press with no Slack user is nobody's: it never passes for the owner of
// a reclaim whose owner Slack does not know.
func TestAPressWithNoUserIsRefused(t *testing.T) {
	e := newEnv(t, "default_channel: \"#gpu\"", owners{}, false, &reclaimtest.Checker{})
	e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-9"))
	e.at(0)
	require.Empty(t, e.only().Warning.Refs["slack.owner"], "no owner known")
	require.Equal(t, http.StatusOK, e.press("", rslack.ActionKeep, e.only().ID))
	require.Equal(t, reclaim.Pending, e.only().State, "nothing changed")
}

// FuzzInteractions sends signed bodies of any shape: the handler answers
// with a status Slack understands and never panics; nothing it was not
// asked for changes.
func FuzzInteractions(f *testing.F) {
	f.Add(payload("U0CAROL", rslack.ActionSnooze1h, "x"))
	f.Add(payload("", rslack.ActionRelease, ""))
	f.Add("payload=%7B%22type%22%3A%22block_actions%22%2C%22actions%22%3A%5B%5D%7D")
	f.Add("payload=not-json")
	f.Add("%zz")
	e := newEnv(f, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
	e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	e.at(0)
	id := e.only().ID
	f.Fuzz(func(t *testing.T, body string) {
		state := func() reclaim.State { r, _ := e.eng.Get(id); return r.State }
		before := state()
		ts := fmt.Sprint(time.Now().Unix())
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte("v0:" + ts + ":" + body))
		req := httptest.NewRequest(http.MethodPost, "/slack/interactions", strings.NewReader(body))
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
		rec := httptest.NewRecorder()
		e.inter.ServeHTTP(rec, req)
		e.inter.Wait()
		// 401: the same body signed in the same second is a replay.
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge}, rec.Code, rec.Body.String())
		if !strings.Contains(body, id) {
			require.Equal(t, before, state(), "a press on no known reclaim changes nothing")
		}
	})
}

// A post whose reply was lost (Slack posted it and answered 500) is not
// posted again by the retry: the retry finds it in the channel by the key
// in its metadata.
func TestALostReplyIsNotPostedTwice(t *testing.T) {
	e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
	e.slack.LoseReplies(1)
	e.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	e.at(0)
	require.Len(t, e.slack.Posts(), 1, "posted once")
	require.True(t, e.only().Warning.Sent)
	require.Equal(t, map[string]string{"slack.msg.D0CAROL": e.slack.Posts()[0].TS}, msgRefs(e.only()), "the message found is the one updated later")
	require.JSONEq(t, fmt.Sprintf(`{"event_type": %q, "event_payload": {"key": %q}}`, rslack.MetadataEventType, e.only().ID+"/warning/0"), string(e.slack.Posts()[0].Metadata))
}

type crash struct{}

// The reclaimer stops right after Slack took the warning and before the
// delivery is recorded; the next engine on the same store finds the
// warning's intent, looks in the owner's DM for its key, and records the
// message it finds instead of posting a second one. The final message
// then updates it.
func TestAWarningIsPostedOnceAcrossACrash(t *testing.T) {
	e := newEnv(t, "", owners{"ml/nb-0": "U0CAROL"}, false, &reclaimtest.Checker{})
	crashing, err := lifecycle.New(lifecycle.Options{Config: e.cfg, Store: e.st, Journal: e.st, Actor: e.actor, Planner: e.actor, Restorer: e.actor, Notifiers: []reclaim.Notifier{e.notifier},
		Clock: e.clock.Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry()),
		Failpoint: func(p string) {
			if p == "after-warning" {
				panic(crash{})
			}
		}})
	require.NoError(t, err)
	_, err = crashing.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")})
	require.NoError(t, err)
	require.NoError(t, crashing.Flush())
	func() {
		defer func() { require.Equal(t, crash{}, recover()) }()
		crashing.Step(context.Background())
	}()
	require.Len(t, e.slack.Posts(), 1)

	restarted, err := lifecycle.New(lifecycle.Options{Config: e.cfg, Store: e.st, Journal: e.st, Actor: e.actor, Planner: e.actor, Restorer: e.actor, Notifiers: []reclaim.Notifier{e.notifier},
		Clock: e.clock.Now, Metrics: lifecycle.NewMetrics(prometheus.NewRegistry())})
	require.NoError(t, err)
	e.eng = restarted
	r := e.only()
	require.False(t, r.Warning.Sent, "the delivery was not recorded")
	require.False(t, r.Warning.FirstTry.IsZero(), "its intent was")
	e.at(time.Second)
	require.Len(t, e.slack.Posts(), 1, "not posted again")
	require.True(t, e.only().Warning.Sent)
	require.Equal(t, map[string]string{"slack.msg.D0CAROL": e.slack.Posts()[0].TS}, msgRefs(e.only()))

	e.at(5*time.Minute + time.Second)
	e.at(5*time.Minute + 2*time.Second)
	require.Equal(t, reclaim.Done, e.only().State)
	require.Len(t, e.slack.Posts(), 1)
	require.Equal(t, "Reclaimed", fakeslack.Header(e.slack.Updates()[len(e.slack.Updates())-1]), "the one warning is updated with the outcome")
}

// msgRefs are the Slack message refs a reclaim's warning holds.
func msgRefs(r *reclaim.Reclaim) map[string]string {
	out := map[string]string{}
	for k, v := range r.Warning.Refs {
		if strings.HasPrefix(k, "slack."+reclaim.MessageRefPrefix) {
			out[k] = v
		}
	}
	return out
}

// Slack's API behind a private CA (a TLS-inspecting proxy's), and behind
// mutual TLS: the slack section's tls_config reaches it.
func TestTLS(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok": true, "channel": "C0123ADMIN", "ts": "1700000000.000100"}`))
	})
	tlstest.Check(t, api, func(t *testing.T, url string, hc config.HTTPClient) error {
		c, err := config.NewHTTPClient(hc, "slack", rslack.CallTimeout)
		require.NoError(t, err)
		n := rslack.New(rslack.Options{Config: &config.Slack{Token: "xoxb-test", APIURL: url + "/", AdminChannel: "C0123ADMIN", MaxRequestsPerMinute: 6000},
			Clock: time.Now, HTTP: c})
		_, _, err = n.Send(context.Background(), reclaim.Message{Kind: reclaim.MsgAdmin, Text: "breaker open"}, nil)
		return err
	})
}

// What a label or a reason carries reaches a button's answer escaped: no
// <!here>, no mention, no link; a presser's own mention stays one.
func TestButtonAnswersAreEscaped(t *testing.T) {
	r := &reclaim.Reclaim{State: reclaim.Exempt, Reason: "namespace <!here> <@U0BOSS> <https://evil.example|click> is exempt"}
	got := rslack.AlreadyForTest(r)
	require.NotContains(t, got, "<!here>")
	require.NotContains(t, got, "<@U0BOSS>")
	require.NotContains(t, got, "<https://")
	require.Contains(t, got, "&lt;!here&gt;")
	r = &reclaim.Reclaim{State: reclaim.Snoozed, Snooze: &reclaim.Snooze{By: "<@U0CAROL>", Until: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}}
	require.Contains(t, rslack.AlreadyForTest(r), "Already snoozed by <@U0CAROL>", "a Slack user's mention stays")
	r.Snooze.By = "<!channel>"
	require.Contains(t, rslack.AlreadyForTest(r), "Already snoozed by &lt;!channel&gt;")
	for _, b := range rslack.Outcome(reclaim.MsgKept, r, "<!everyone>", time.Now(), rslack.Pricing{}, "") {
		raw, err := json.Marshal(b)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "<!everyone>")
	}
}
