package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
)

type fixture struct {
	t         *testing.T
	clock     *fakeclock.Clock
	notifier  *reclaimtest.Notifier
	actor     *reclaimtest.Actor
	checker   *reclaimtest.Checker
	inspector *reclaimtest.Inspector
	// verifier, when set, says whether actions freed the GPU.
	verifier *reclaimtest.Verifier
	cfg      *config.Config
	path     string
	st       *store.Bolt
	eng      *lifecycle.Engine
	metrics  *lifecycle.Metrics
	reg      *prometheus.Registry
	// failpoint, when set, is called at the engine's failpoints.
	failpoint func(string)
}

// testPolicies are the default policies with a grace of 5 minutes, which
// the tests' clocks count in.
const testPolicies = `
policies:
  - {name: idle, matchers: ['alertname="GPUIdle"'], action: auto, grace: 5m}
  - {name: notify, matchers: ['alertname=~"GPUWasted|GPUOvercommitted|MIGInstanceOversized"'], action: notify}
`

func newFixture(t *testing.T, cfgYAML string) *fixture {
	if !strings.Contains(cfgYAML, "policies:") {
		cfgYAML += testPolicies
	}
	f := &fixture{t: t, clock: reclaimtest.NewClock(), notifier: reclaimtest.NewNotifier("test"), actor: &reclaimtest.Actor{}, checker: &reclaimtest.Checker{}, inspector: &reclaimtest.Inspector{},
		cfg: reclaimtest.Config(t, cfgYAML), path: filepath.Join(t.TempDir(), "state.db")}
	f.open()
	return f
}

// open starts an engine on the fixture's store, as after a restart.
func (f *fixture) open() {
	var err error
	f.st, err = store.Open(f.path, time.Second)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { f.st.Close() })
	f.reg = prometheus.NewRegistry()
	f.metrics = lifecycle.NewMetrics(f.reg)
	o := lifecycle.Options{
		Config: f.cfg, Store: f.st, Journal: f.st, Checker: f.checker, Inspector: f.inspector, Actor: f.actor, Planner: f.actor, Restorer: f.actor,
		Notifiers: []reclaim.Notifier{f.notifier}, Clock: f.clock.Now, Metrics: f.metrics, Failpoint: f.failpoint,
	}
	if f.verifier != nil {
		o.Verifier = f.verifier
	}
	f.eng, err = lifecycle.New(o)
	require.NoError(f.t, err)
}

// with starts an engine on the fixture's store, clock, actor and notifier,
// but no checker or inspector, with its options changed.
func (f *fixture) with(change func(*lifecycle.Options)) {
	o := lifecycle.Options{Config: f.cfg, Store: f.st, Journal: f.st, Actor: f.actor, Planner: f.actor, Restorer: f.actor, Notifiers: []reclaim.Notifier{f.notifier}, Clock: f.clock.Now, Metrics: f.metrics}
	change(&o)
	var err error
	f.eng, err = lifecycle.New(o)
	require.NoError(f.t, err)
}

func (f *fixture) restart() {
	require.NoError(f.t, f.st.Close())
	f.open()
}

func (f *fixture) ingest(alerts ...notification.Alert) lifecycle.IngestResult {
	f.t.Helper()
	res, err := f.eng.Ingest(alerts)
	require.NoError(f.t, err)
	require.NoError(f.t, f.eng.Flush())
	return res
}

// at moves the clock to reclaimtest.T0+d and steps.
func (f *fixture) at(d time.Duration) {
	f.clock.Set(reclaimtest.T0.Add(d))
	f.eng.Step(context.Background())
}

func (f *fixture) only() *reclaim.Reclaim {
	f.t.Helper()
	rs := f.eng.List()
	require.Len(f.t, rs, 1)
	return rs[0]
}

func (f *fixture) of(owner string) *reclaim.Reclaim {
	f.t.Helper()
	for _, r := range f.eng.List() {
		if r.Target.Holder() == owner {
			return r
		}
	}
	f.t.Fatalf("no reclaim for %s", owner)
	return nil
}

func (f *fixture) metric(name string, labels ...string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(f.t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.Label {
					found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}

func TestWarnGraceAct(t *testing.T) {
	f := newFixture(t, "")
	require.Equal(t, 1, f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")).New)
	f.at(0)
	r := f.only()
	require.Equal(t, reclaim.Pending, r.State)
	require.True(t, r.Warning.Sent)
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute), r.ActAt, "the policy's grace")
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds())

	f.at(5*time.Minute - time.Second)
	require.Zero(t, f.actor.Count(), "not before the grace ends")
	f.at(5 * time.Minute)
	require.Equal(t, []string{"evict ml/nb-0"}, f.actor.Calls)
	r = f.only()
	require.Equal(t, reclaim.Done, r.State)
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute), r.ActedAt)
	f.at(5*time.Minute + time.Second)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgReclaimed}, f.notifier.Kinds())
	require.True(t, f.only().Final.Sent)
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_actions_total", "action", "evict", "result", "done"))
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_reclaimed_gpus_total"))
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_reclaims", "state", "done"))

	events, err := f.eng.Audit(10)
	require.NoError(t, err)
	var kinds []string
	for _, e := range events {
		kinds = append([]string{e.Kind}, kinds...)
	}
	require.Equal(t, []string{"decided", "warned", "acting", "carried_out", "done"}, kinds, "the audit trail, oldest first")
}

func TestResolvedBeforeTheGraceEndsCancels(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	f.clock.Set(reclaimtest.T0.Add(3 * time.Minute))
	require.Equal(t, 1, f.ingest(reclaimtest.IdlePod("resolved", reclaimtest.T0, "ml", "nb-0")).Cancelled)
	f.at(10 * time.Minute)
	require.Zero(t, f.actor.Count())
	r := f.only()
	require.Equal(t, reclaim.Cancelled, r.State)
	require.Contains(t, r.Reason, "resolved")
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgCancelled}, f.notifier.Kinds(), "the warned owner hears it is off")
}

func TestDuplicateAndOutOfOrderDeliveries(t *testing.T) {
	f := newFixture(t, "")
	a := reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")
	// An HA pair delivers twice; retries deliver again.
	require.Equal(t, 1, f.ingest(a, a).New)
	require.Equal(t, 1, f.ingest(a).Duplicate)
	f.at(0)
	f.at(time.Second)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds())
	f.at(5 * time.Minute)
	f.ingest(a)
	f.at(6 * time.Minute)
	require.Equal(t, 1, f.actor.Count(), "acted once")

	// Resolved before its firing notification: the late firing one is ignored.
	b := reclaimtest.IdlePod("resolved", reclaimtest.T0.Add(time.Hour), "ml", "nb-1")
	f.clock.Set(reclaimtest.T0.Add(time.Hour))
	f.ingest(b)
	b.Status = "firing"
	require.Equal(t, 1, f.ingest(b).Duplicate)
	f.at(2 * time.Hour)
	require.Equal(t, 1, f.actor.Count())
	require.Equal(t, reclaim.Resolved, f.of("ml/nb-1").State)
}

func TestRefiringWithANewStartsAtStartsOver(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	// The resolved notification was lost; the alert fires again as a new episode.
	f.clock.Set(reclaimtest.T0.Add(4 * time.Minute))
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0.Add(4*time.Minute), "ml", "nb-0"))
	f.at(4 * time.Minute)
	f.at(5 * time.Minute)
	require.Zero(t, f.actor.Count(), "the first episode's grace no longer counts")
	f.at(9 * time.Minute)
	require.Equal(t, 1, f.actor.Count())
	f.at(9*time.Minute + time.Second)
	var states []reclaim.State
	for _, r := range f.eng.List() {
		states = append(states, r.State)
	}
	require.ElementsMatch(t, []reclaim.State{reclaim.Cancelled, reclaim.Done}, states)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgWarning, reclaim.MsgReclaimed}, f.notifier.Kinds())
}

func TestExemptions(t *testing.T) {
	f := newFixture(t, "exemptions: {namespaces: [prod], users: [svc-infer]}\n")
	f.inspector.Keep = map[string]bool{"ml/annotated": true}
	f.ingest(
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "labelled", "keep", "true"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "prod", "api"),
		reclaimtest.IdleProcess("firing", reclaimtest.T0, "svc-infer"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "annotated"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "plain"),
	)
	f.at(0)
	f.at(10 * time.Minute)
	f.at(11 * time.Minute)
	require.Equal(t, []string{"evict ml/plain"}, f.actor.Calls)
	for owner, why := range map[string]string{
		"ml/labelled":  "marked gpureclaim.io/keep",
		"prod/api":     "namespace prod is exempt",
		"svc-infer":    "user svc-infer is exempt",
		"ml/annotated": "the pod is annotated gpureclaim.io/keep",
	} {
		r := f.of(owner)
		require.Equal(t, reclaim.Exempt, r.State, owner)
		require.Equal(t, why, r.Reason, owner)
	}
	require.Len(t, f.notifier.Sent, 2, "only the plain pod's owner is warned and told")
}

// A keep placed after the warning, during the grace, stops the action:
// the keep is looked at again right before it, and the owner is told.
func TestKeepDuringTheGraceCancels(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds())
	f.inspector.SetKeep("ml/nb-0", true)
	f.at(5 * time.Minute)
	f.at(6 * time.Minute)
	require.Zero(t, f.actor.Count(), "kept during the grace: nothing is stopped")
	r := f.only()
	require.Equal(t, reclaim.Cancelled, r.State)
	require.Equal(t, "kept: the pod is annotated gpureclaim.io/keep", r.Reason)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgCancelled}, f.notifier.Kinds())
}

func TestMinimumRuntime(t *testing.T) {
	f := newFixture(t, "")
	f.inspector.Start = map[string]time.Time{"ml/young": reclaimtest.T0.Add(-10 * time.Minute)}
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "young"))
	f.at(0)
	f.at(5 * time.Minute)
	r := f.only()
	require.Zero(t, f.actor.Count())
	require.Equal(t, reclaimtest.T0.Add(20*time.Minute), r.ActAt, "30 minutes from its start")
	require.Contains(t, r.Reason, "spares it until it has run 30m0s")
	f.at(20 * time.Minute)
	require.Equal(t, 1, f.actor.Count())
}

func TestScheduleWindows(t *testing.T) {
	// reclaimtest.T0 is Monday 10:00 UTC; the window opens at 22:00.
	f := newFixture(t, `policies:
  - name: nightly
    matchers: ['alertname="GPUIdle"']
    action: auto
    grace: 5m
    windows: [{from: "22:00", to: "06:00", days: [mon, tue, wed, thu, fri]}]
`)
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	f.at(5 * time.Minute)
	require.Zero(t, f.actor.Count())
	require.Equal(t, time.Date(2026, 3, 2, 22, 0, 0, 0, time.UTC), f.only().ActAt)
	f.at(12 * time.Hour)
	require.Equal(t, 1, f.actor.Count())
}

func TestRateLimits(t *testing.T) {
	f := newFixture(t, "rate_limits: {global: {max: 3, per: 1h}, per_namespace: {max: 1, per: 1h}}\n")
	f.ingest(
		reclaimtest.IdlePod("firing", reclaimtest.T0, "a", "p1"), reclaimtest.IdlePod("firing", reclaimtest.T0, "a", "p2"),
		reclaimtest.IdlePod("firing", reclaimtest.T0, "b", "p1"), reclaimtest.IdlePod("firing", reclaimtest.T0, "c", "p1"), reclaimtest.IdlePod("firing", reclaimtest.T0, "d", "p1"),
	)
	f.at(0)
	f.at(5 * time.Minute)
	require.Equal(t, 3, f.actor.Count(), "the global limit")
	counts := map[string]int{}
	for _, c := range f.actor.Calls {
		counts[c[len("evict "):len("evict ")+1]]++
	}
	require.LessOrEqual(t, counts["a"], 1, "one per namespace")
	require.Equal(t, 2.0, f.metric("gpureclaim_reclaimer_reclaims", "state", "pending"))
	f.at(65 * time.Minute)
	require.Equal(t, 5, f.actor.Count(), "an hour later, the rest")
}

func TestCircuitBreaker(t *testing.T) {
	f := newFixture(t, "circuit_breaker: {max_pending: 3}\n")
	var burst []notification.Alert
	for i := range 4 {
		burst = append(burst, reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", fmt.Sprint("p", i)))
	}
	f.ingest(burst...)
	f.at(0)
	require.True(t, f.eng.BreakerOpen())
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_circuit_breaker_open"))
	f.at(10 * time.Minute)
	require.Zero(t, f.actor.Count(), "nothing while the breaker is open")
	var admin []string
	for _, m := range f.notifier.Sent {
		if m.Kind == reclaim.MsgAdmin {
			admin = append(admin, m.Text)
		}
	}
	require.Len(t, admin, 1)
	require.Contains(t, admin[0], "Circuit breaker open: 4 targets are pending")

	// Two resolve: the breaker closes and the rest proceed.
	f.ingest(reclaimtest.IdlePod("resolved", reclaimtest.T0, "ml", "p0"), reclaimtest.IdlePod("resolved", reclaimtest.T0, "ml", "p1"))
	f.at(11 * time.Minute)
	require.False(t, f.eng.BreakerOpen())
	f.at(12 * time.Minute)
	require.Equal(t, 2, f.actor.Count())
}

func TestDryRun(t *testing.T) {
	for name, cfg := range map[string]string{
		"global": "dry_run: true\n",
		"policy": "policies: [{name: p, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m, dry_run: true}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, cfg)
			f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
			f.at(0)
			f.at(5 * time.Minute)
			f.at(6 * time.Minute)
			require.Zero(t, f.actor.Count())
			r := f.only()
			require.Equal(t, reclaim.DryRun, r.State)
			require.Equal(t, "dry run: would have run evict", r.Reason)
			require.Equal(t, []reclaim.MessageKind{reclaim.MsgAdmin}, f.notifier.Kinds(), "owners are not warned in a dry run; admins see the outcome")
			require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_actions_total", "action", "evict", "result", "dry_run"))
		})
	}
}

func TestAlertmanagerRecheck(t *testing.T) {
	for _, tc := range []struct {
		status reclaim.AlertStatus
		err    error
		state  reclaim.State
		want   string
	}{
		{reclaim.AlertSilenced, nil, reclaim.Snoozed, "the alert is silenced: snoozed by alice"},
		{reclaim.AlertGone, nil, reclaim.Cancelled, "the alert no longer fires"},
	} {
		f := newFixture(t, "")
		f.checker.Set(tc.status, "snoozed by alice", reclaimtest.T0.Add(time.Hour))
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		f.at(0)
		f.at(5 * time.Minute)
		require.Zero(t, f.actor.Count())
		require.Equal(t, tc.state, f.only().State)
		require.Contains(t, f.only().Reason, tc.want)
	}
	f := newFixture(t, "")
	f.checker.Err = errors.New("connection refused")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	f.at(5 * time.Minute)
	require.Zero(t, f.actor.Count(), "never act on a belief that cannot be checked")
	require.Equal(t, reclaim.Pending, f.only().State)
	f.checker.Err = nil
	f.at(6 * time.Minute)
	require.Equal(t, 1, f.actor.Count())
}

func TestSnoozeEndsAndTheCycleStartsAgain(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	require.Zero(t, f.only().WarningRound)
	f.checker.Set(reclaim.AlertSilenced, "snoozed by alice for 1h", reclaimtest.T0.Add(time.Hour))
	f.at(5 * time.Minute)
	require.Equal(t, reclaim.Snoozed, f.only().State)
	f.at(30 * time.Minute)
	require.Zero(t, f.actor.Count())

	f.checker.Set(reclaim.AlertActive, "", time.Time{})
	f.at(time.Hour)
	r := f.only()
	require.Equal(t, reclaim.Pending, r.State, "still idle when the snooze ends: warned again")
	require.Equal(t, 1, r.WarningRound, "a new round: receivers do not take the new warning for the old one")
	f.at(time.Hour + time.Second)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgWarning}, f.notifier.Kinds())
	require.Equal(t, reclaimtest.T0.Add(time.Hour+time.Second+5*time.Minute), f.only().ActAt, "the grace runs from the new warning")
	f.at(time.Hour + 5*time.Minute)
	require.Zero(t, f.actor.Count())
	f.at(time.Hour + time.Second + 5*time.Minute)
	require.Equal(t, 1, f.actor.Count())
}

func TestASilenceFoundLaterKeepsWhoSnoozed(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	_, err := f.eng.Snooze(context.Background(), f.only().ID, "U1", reclaimtest.T0.Add(time.Hour), "silence-1")
	require.NoError(t, err)
	f.checker.Set(reclaim.AlertSilenced, "snoozed by U1 again", reclaimtest.T0.Add(2*time.Hour))
	f.at(time.Hour)
	r := f.only()
	require.Equal(t, reclaim.Snoozed, r.State)
	require.Equal(t, &reclaim.Snooze{Silence: "silence-1", By: "U1", Until: reclaimtest.T0.Add(2 * time.Hour)}, r.Snooze,
		"the silence's new end, and still who snoozed it and with which silence")
}

func TestActionOutcomes(t *testing.T) {
	t.Run("retry later (a PodDisruptionBudget)", func(t *testing.T) {
		f := newFixture(t, "")
		f.actor.Err, f.actor.Once = &reclaim.RetryError{After: time.Minute, Err: errors.New("blocked by a PodDisruptionBudget")}, true
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		f.at(0)
		f.at(5 * time.Minute)
		require.Equal(t, reclaim.Acting, f.only().State)
		require.Contains(t, f.only().Reason, "PodDisruptionBudget")
		f.at(6 * time.Minute)
		require.Equal(t, reclaim.Done, f.only().State)
		require.Equal(t, 2, f.actor.Count())
	})
	t.Run("refused by the node", func(t *testing.T) {
		f := newFixture(t, "")
		f.actor.Err = &reclaim.RefusedError{Reason: "the unit is busy again"}
		f.ingest(reclaimtest.IdleProcess("firing", reclaimtest.T0, "bob"))
		f.at(0)
		f.at(5 * time.Minute)
		require.Equal(t, reclaim.Cancelled, f.only().State)
		require.Equal(t, "the unit is busy again", f.only().Reason)
	})
	t.Run("already gone", func(t *testing.T) {
		f := newFixture(t, "")
		f.actor.Err = reclaim.ErrGone
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		f.at(0)
		f.at(5 * time.Minute)
		require.Equal(t, reclaim.Done, f.only().State)
		require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_actions_total", "result", "gone"))
	})
	t.Run("fails for good", func(t *testing.T) {
		f := newFixture(t, "")
		f.actor.Err = errors.New("forbidden")
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		f.at(0)
		for i := 0; i < 10; i++ {
			f.at(5*time.Minute + time.Duration(i)*10*time.Minute)
		}
		require.Equal(t, reclaim.Failed, f.only().State)
		require.Equal(t, 5, f.actor.Count())
		require.Contains(t, f.notifier.Kinds(), reclaim.MsgFailed)
	})
}

func TestNotifyPolicyOnlyTells(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.Alert("firing", reclaimtest.T0, "alertname", "GPUWasted", "uuid", "GPU-1", "node", "n1", "namespace", "ml", "pod", "p", "action", "notify"))
	f.at(0)
	f.at(time.Hour)
	require.Zero(t, f.actor.Count())
	require.Equal(t, reclaim.Notified, f.only().State)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgNotice}, f.notifier.Kinds())
}

func TestNoActionUntilTheWarningIsDelivered(t *testing.T) {
	f := newFixture(t, "")
	f.notifier.Fail = errors.New("slack is down")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	for m := 0; m <= 30; m++ {
		f.at(time.Duration(m) * time.Minute)
	}
	require.Zero(t, f.actor.Count())
	require.False(t, f.only().Warning.Sent)
	require.Contains(t, f.only().Reason, "slack is down")
	f.notifier.Fail = nil
	f.at(36 * time.Minute) // the next retry, with backoff
	r := f.only()
	require.True(t, r.Warning.Sent)
	require.Equal(t, reclaimtest.T0.Add(41*time.Minute), r.ActAt, "the whole grace runs from the delivered warning")
	require.Contains(t, f.notifier.Sent[0].Text, "at "+reclaimtest.T0.Add(41*time.Minute).Format(time.RFC3339), "the warning states that time, not one already past")
	f.at(40 * time.Minute)
	require.Zero(t, f.actor.Count(), "no action within the grace")
	f.at(41 * time.Minute)
	require.Equal(t, 1, f.actor.Count())
}

// A backlog of messages ahead of a warning moves its action, never
// shortens its grace: the owner is told a time still to come.
func TestGraceRunsFromTheDeliveredWarning(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	// The warning goes out late: the first step comes 4 of the 5 minutes after the alert.
	f.at(4 * time.Minute)
	r := f.only()
	require.True(t, r.Warning.Sent)
	require.Equal(t, reclaimtest.T0.Add(9*time.Minute), r.ActAt)
	require.Contains(t, f.notifier.Sent[0].Text, "at "+reclaimtest.T0.Add(9*time.Minute).Format(time.RFC3339))
	f.at(5 * time.Minute)
	require.Zero(t, f.actor.Count(), "the alert's grace ended; the owner's has not")
	f.at(9 * time.Minute)
	require.Equal(t, 1, f.actor.Count())
}

func TestRestartResumesEveryTimer(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "a"))
	f.at(0)
	f.clock.Set(reclaimtest.T0.Add(2 * time.Minute))
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0.Add(2*time.Minute), "ml", "b"))
	f.at(2 * time.Minute)
	f.restart()
	f.at(5 * time.Minute)
	require.Equal(t, []string{"evict ml/a"}, f.actor.Calls)
	f.restart()
	f.at(5*time.Minute + time.Second)
	f.at(7 * time.Minute)
	require.Equal(t, []string{"evict ml/a", "evict ml/b"}, f.actor.Calls)
	f.at(8 * time.Minute)
	require.Equal(t, 2, count(f.notifier.Kinds(), reclaim.MsgWarning), "no warning twice across restarts")
	require.Equal(t, 2, count(f.notifier.Kinds(), reclaim.MsgReclaimed))
}

func count[T comparable](xs []T, want T) int {
	n := 0
	for _, x := range xs {
		if x == want {
			n++
		}
	}
	return n
}

var _ = testutil.ToFloat64

// The action is decided on the pod's top owner: left to the alert (auto),
// a one-replica service is scaled down, a job or notebook stopped the way
// its controller expects, a bare pod evicted; with several replicas, or
// under an owner the reclaimer cannot stop, the owner is only told, and
// why. A policy that names evict or scale_down never acts beneath an owner
// that would undo it.
func TestActionOnTheTopOwner(t *testing.T) {
	owners := map[string]reclaim.TopOwner{
		"serve/api-0":    {APIVersion: "apps/v1", Kind: "Deployment", Namespace: "serve", Name: "api", Replicas: 1, Stop: reclaim.StopScale, Stopped: "scaled down"},
		"serve/multi-0":  {APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "serve", Name: "multi", Replicas: 3, Stop: reclaim.StopScale, Stopped: "scaled down"},
		"batch/train-0":  {APIVersion: "batch/v1", Kind: "Job", Namespace: "batch", Name: "train", Stop: reclaim.StopPatch, Stopped: "suspended"},
		"lab/alice-0":    {APIVersion: "kubeflow.org/v1", Kind: "Notebook", Namespace: "lab", Name: "alice", Stop: reclaim.StopPatch, Stopped: "stopped"},
		"lab/jupyter-bo": {Kind: "JupyterHub server", Name: "bo", Stop: reclaim.StopHub, Stopped: "stopped through the hub"},
		"x/run-0":        {Kind: "TrainingRun", Namespace: "x", Name: "run", Stop: reclaim.StopNone, Why: "the pod is owned by TrainingRun x/run, which gpureclaim cannot stop; declare it under `workloads:`"},
	}
	for _, tc := range []struct {
		policy, pod string
		action      config.Action // "" when only told
		reason      string
		warning     string
	}{
		{"auto", "serve/api-0", "scale_down", "", "reclaimed (Deployment serve/api scaled down)"},
		{"auto", "serve/multi-0", "", "one of 3 replicas of StatefulSet serve/multi", ""},
		{"auto", "batch/train-0", "stop", "", "reclaimed (Job batch/train suspended)"},
		{"auto", "lab/alice-0", "stop", "", "reclaimed (Notebook lab/alice stopped)"},
		{"auto", "lab/jupyter-bo", "stop", "", "reclaimed (JupyterHub server bo stopped through the hub)"},
		{"auto", "lab/bare", "evict", "", "reclaimed (evict)"},
		{"auto", "x/run-0", "", "TrainingRun x/run, which gpureclaim cannot stop; declare it under `workloads:`", ""},
		{"evict", "serve/api-0", "", "Deployment serve/api runs the pod and would start another if it were evicted", ""},
		{"evict", "batch/train-0", "", "Job batch/train runs the pod and would start another", ""},
		{"evict", "lab/bare", "evict", "", "reclaimed (evict)"},
		{"evict", "x/run-0", "", "declare it under `workloads:`", ""},
		{"scale_down", "batch/train-0", "", "Job batch/train does not scale", ""},
		{"scale_down", "lab/bare", "", "has no controller to scale down", ""},
		{"scale_down", "serve/multi-0", "scale_down", "", "reclaimed (StatefulSet serve/multi scaled down)"},
		{"stop", "batch/train-0", "stop", "", "reclaimed (Job batch/train suspended)"},
	} {
		t.Run(tc.policy+" "+tc.pod, func(t *testing.T) {
			f := newFixture(t, fmt.Sprintf("policies: [{name: p, matchers: ['alertname=\"GPUIdle\"'], action: %s, grace: 5m}]\n", tc.policy))
			f.inspector.Controllers = owners
			ns, pod, _ := strings.Cut(tc.pod, "/")
			f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, ns, pod))
			f.at(0)
			r := f.of(tc.pod)
			f.at(5 * time.Minute)
			if tc.action == "" {
				require.Equal(t, reclaim.Notified, r.State)
				require.Contains(t, r.Reason, tc.reason)
				require.Empty(t, f.actor.Calls, "nothing is done beneath the owner")
				require.Equal(t, []reclaim.MessageKind{reclaim.MsgNotice}, f.notifier.Kinds())
				return
			}
			require.Equal(t, tc.action, r.Action)
			require.Equal(t, []string{string(tc.action) + " " + tc.pod}, f.actor.Calls)
			require.Contains(t, f.notifier.Sent[0].Text, tc.warning)
		})
	}
}

// While the top owner cannot be looked up nothing is decided: no warning
// goes out (its grace would run for the wrong action), and nothing is done.
func TestTopOwnerLookupFailureHoldsTheWarning(t *testing.T) {
	f := newFixture(t, "")
	f.inspector.ControllerErr = errors.New("apiserver unavailable")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "batch", "train-0"))
	f.at(0)
	f.at(10 * time.Minute)
	r := f.of("batch/train-0")
	require.Equal(t, reclaim.Pending, r.State)
	require.False(t, r.Warning.Sent)
	require.Contains(t, r.Reason, "cannot look up what owns the pod yet")
	require.Empty(t, f.notifier.Sent)
	require.Empty(t, f.actor.Calls)

	f.inspector.ControllerErr = nil
	f.inspector.Controllers = map[string]reclaim.TopOwner{"batch/train-0": {APIVersion: "batch/v1", Kind: "Job", Namespace: "batch", Name: "train", Stop: reclaim.StopPatch, Stopped: "suspended"}}
	f.at(11 * time.Minute)
	require.True(t, f.of("batch/train-0").Warning.Sent)
	require.Equal(t, config.ActionStop, f.of("batch/train-0").Action)
}

// An older episode of an alert that arrives after a newer one (an HA pair,
// a retry) is ignored: no second warning, no cancellation after the fact.
func TestStaleEpisodeIsIgnored(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0.Add(time.Hour), "ml", "nb-0"))
	f.at(time.Hour)
	res := f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	require.Equal(t, 1, res.Ignored)
	require.Len(t, f.eng.List(), 1, "no record of the stale episode")
	f.at(time.Hour + time.Minute)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds(), "one warning")
	require.Equal(t, reclaim.Pending, f.only().State)
	require.Equal(t, 1.0, f.metric("gpureclaim_reclaimer_decisions_total", "decision", "stale"))
}

// crash is a power cut at a failpoint: the step stops there, nothing after
// it is written.
type crash struct{ at string }

// stepUntilCrash steps at reclaimtest.T0+d and stops at the failpoint.
func (f *fixture) stepUntilCrash(d time.Duration, at string) {
	f.t.Helper()
	f.failpoint = func(name string) {
		if name == at {
			panic(crash{at})
		}
	}
	f.restart()
	defer func() {
		r := recover()
		require.Equal(f.t, crash{at}, r, "the step reached %s", at)
		f.failpoint = nil
		f.restart()
	}()
	f.at(d)
}

// After a restart in the middle of an action, the reclaim ends as what
// was done, not as cancelled by the action's own effect: not when the
// workload is gone (a positive minimum runtime looks for its start), not
// when the alert has resolved since (the GPU is free).
func TestRestartAfterTheActionRecordsTheTruth(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(f *fixture)
	}{
		{"the workload is gone", func(f *fixture) { f.inspector.Gone = map[string]bool{"ml/nb-0": true} }},
		{"the alert has resolved", func(f *fixture) { f.checker.Set(reclaim.AlertGone, "", time.Time{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m, min_runtime: 30m}]\n")
			f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
			f.at(0)
			f.stepUntilCrash(5*time.Minute, "after-action")
			require.Equal(t, reclaim.Acting, f.only().State, "the action ran; its outcome was not written")
			tc.after(f)
			f.actor.Err = reclaim.ErrGone        // run again, the eviction finds the pod gone
			f.at(5*time.Minute + 40*time.Second) // down 40 s
			r := f.only()
			require.Equal(t, reclaim.Done, r.State, r.Reason)
			require.Contains(t, r.Reason, "the action begun before the reclaimer restarted took effect")
			require.Equal(t, reclaimtest.T0.Add(5*time.Minute), r.ActedAt, "acted_at is when the action began, not the restart")
			f.at(5*time.Minute + 41*time.Second)
			require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgReclaimed}, f.notifier.Kinds(), "the owner hears one story")
		})
	}
}

// Killed before the action, restarted 40 s later: the action runs then,
// and acted_at is when it was confirmed, not when the first try began.
func TestActedAtIsWhenTheActionWasConfirmed(t *testing.T) {
	f := newFixture(t, "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 5m}]\n")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	f.stepUntilCrash(5*time.Minute, "before-action")
	require.Zero(t, f.actor.Count(), "nothing was done before the crash")
	f.at(5*time.Minute + 40*time.Second)
	require.Equal(t, 1, f.actor.Count())
	r := f.only()
	require.Equal(t, reclaimtest.T0.Add(5*time.Minute+40*time.Second), r.ActedAt, "the action the node confirmed, after the restart")
}

// An action that failed and will be retried did not take effect: the next
// attempt checks everything again, and a resolved alert cancels it.
func TestRetriedActionChecksAgain(t *testing.T) {
	f := newFixture(t, "")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	f.at(0)
	f.actor.Err = &reclaim.RetryError{After: time.Minute, Err: errors.New("a PodDisruptionBudget refuses")}
	f.at(5 * time.Minute)
	require.Equal(t, reclaim.Acting, f.only().State)
	require.True(t, f.only().ActingSince.IsZero())
	f.checker.Set(reclaim.AlertGone, "", time.Time{})
	f.at(6 * time.Minute)
	require.Equal(t, reclaim.Cancelled, f.only().State)
	require.Equal(t, 1, f.actor.Count())
}

// Release-now acts at once, past the grace, a window, the minimum runtime
// and the owner's own snooze; but only on the episode the owner pressed on.
func TestReleaseNow(t *testing.T) {
	cfg := "policies: [{name: idle, matchers: ['alertname=\"GPUIdle\"'], action: auto, grace: 15m, min_runtime: 30m}]\n"
	t.Run("acts at once, before the grace and the minimum runtime", func(t *testing.T) {
		f := newFixture(t, cfg)
		f.inspector.Start = map[string]time.Time{"ml/nb-0": reclaimtest.T0} // started just now
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		f.at(0)
		_, err := f.eng.ReleaseNow(context.Background(), f.only().ID, "<@U0CAROL>")
		require.NoError(t, err)
		f.at(time.Second)
		require.Equal(t, reclaim.Done, f.only().State)
		require.Equal(t, 1, f.actor.Count())
	})
	t.Run("the episode has resolved since: cancelled, nothing done", func(t *testing.T) {
		f := newFixture(t, cfg)
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
		f.at(0)
		_, err := f.eng.ReleaseNow(context.Background(), f.only().ID, "<@U0CAROL>")
		require.NoError(t, err)
		f.checker.Set(reclaim.AlertGone, "", time.Time{})
		f.at(time.Second)
		require.Equal(t, reclaim.Cancelled, f.only().State)
		require.Zero(t, f.actor.Count())
	})
}

// Pages walk every reclaim once, newest first, with a state filter.
func TestPages(t *testing.T) {
	f := newFixture(t, "")
	for i := range 7 {
		f.clock.Set(reclaimtest.T0.Add(time.Duration(i) * time.Minute))
		f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", fmt.Sprintf("nb-%d", i)))
	}
	all := f.eng.List()
	require.Len(t, all, 7)
	var walked []string
	q := lifecycle.Query{Limit: 3}
	for {
		p := f.eng.Page(q)
		for _, r := range p.Reclaims {
			walked = append(walked, r.Target.Pod)
		}
		require.LessOrEqual(t, len(p.Reclaims), 3)
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	require.Equal(t, []string{"nb-6", "nb-5", "nb-4", "nb-3", "nb-2", "nb-1", "nb-0"}, walked)
	require.Empty(t, f.eng.Page(lifecycle.Query{States: map[reclaim.State]bool{reclaim.Done: true}}).Reclaims)
	require.Len(t, f.eng.Page(lifecycle.Query{States: map[reclaim.State]bool{reclaim.Pending: true}}).Reclaims, 7)
}

// A warning that cannot go out holds the reclaim; past warning_deadline
// the admins are told, once.
func TestUndeliveredWarningIsEscalatedAtTheDeadline(t *testing.T) {
	f := newFixture(t, "warning_deadline: 10m\n")
	f.notifier.Fail = errors.New("slack is down")
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	for m := 0; m < 10; m++ {
		f.at(time.Duration(m) * time.Minute)
	}
	require.False(t, f.only().Warning.Escalated, "not before the deadline")
	for m := 10; m <= 40; m++ {
		f.at(time.Duration(m) * time.Minute)
	}
	r := f.only()
	require.True(t, r.Warning.Escalated)
	require.Equal(t, reclaimtest.T0, r.Warning.FirstTry)
	require.Zero(t, f.actor.Count(), "held, whatever the grace")
}

// A kill interrupted by a restart ends done with the PIDs it set out to
// end, written before it ran, even though the node finds them gone.
func TestRestartAfterAKillKeepsItsPIDs(t *testing.T) {
	f := newFixture(t, "")
	f.actor.PIDs = []int{4242, 4243}
	f.ingest(reclaimtest.IdleProcess("firing", reclaimtest.T0, "bob"))
	f.at(0)
	f.stepUntilCrash(5*time.Minute, "after-action")
	require.Equal(t, []int{4242, 4243}, f.only().Planned)
	f.checker.Set(reclaim.AlertGone, "", time.Time{}) // the GPU is free: the kill worked
	f.actor.Err = reclaim.ErrGone
	f.at(5*time.Minute + time.Second)
	r := f.only()
	require.Equal(t, reclaim.Done, r.State)
	require.Equal(t, []int{4242, 4243}, r.Killed)
	require.Contains(t, r.Reason, "processes [4242 4243] are gone")
}

// A Slurm job's suggested cancel is taken where the reclaimer reaches
// slurmrestd; without, its processes are killed as before.
func TestSlurmJobIsCancelled(t *testing.T) {
	job := func(f *fixture) {
		f.ingest(reclaimtest.IdleProcess("firing", reclaimtest.T0, "alice", "slurm_job", "4242", "action", "cancel"))
		f.at(0)
		f.at(5 * time.Minute)
	}
	f := newFixture(t, "slurm: {url: \"unix:///run/slurmrestd.socket\"}\n")
	job(f)
	require.Equal(t, reclaim.Done, f.only().State)
	require.Equal(t, config.ActionCancel, f.only().Action)
	require.Equal(t, "4242", f.only().Target.SlurmJob)

	f = newFixture(t, "")
	job(f)
	require.Equal(t, config.ActionKill, f.only().Action, "no slurmrestd: its processes are killed")
}

// orderNotifier notes, at each message, how many actions were taken before it.
// Each message takes a millisecond, as a real one takes longer.
type orderNotifier struct {
	*reclaimtest.Notifier
	actor      *reclaimtest.Actor
	mu         sync.Mutex
	actsBefore []int
	onSend     func(sent int)
}

func (n *orderNotifier) Send(ctx context.Context, m reclaim.Message, refs map[string]string) (map[string]string, []string, error) {
	n.mu.Lock()
	n.actsBefore = append(n.actsBefore, n.actor.Count())
	if n.onSend != nil {
		n.onSend(len(n.actsBefore))
	}
	n.mu.Unlock()
	time.Sleep(time.Millisecond)
	return n.Notifier.Send(ctx, m, refs)
}

// Actions go first, then work longest due: an action due since the grace
// ended is taken before the warnings of a burst of alerts, whatever their
// ids; and a step that runs out of time looks again at once, so an action
// that falls due in the middle of a burst waits about one step.
func TestDueActionGoesBeforeABurstOfWarnings(t *testing.T) {
	f := newFixture(t, "circuit_breaker: {max_pending: 0}\n")
	clock, actor := f.clock, f.actor
	n := &orderNotifier{Notifier: f.notifier, actor: actor}
	f.with(func(o *lifecycle.Options) { o.Notifiers = []reclaim.Notifier{n} })
	eng := f.eng
	ctx := context.Background()
	var err error

	// "zz" sorts after every burst pod: an order by id would act last.
	_, err = eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "zz-old")})
	require.NoError(t, err)
	eng.Step(ctx)
	require.Equal(t, []int{0}, n.actsBefore, "warned")

	clock.Advance(6 * time.Minute)
	var burst []notification.Alert
	for i := range 50 {
		burst = append(burst, reclaimtest.IdlePod("firing", clock.Now(), "ml", fmt.Sprintf("aa-%02d", i)))
	}
	_, err = eng.Ingest(burst)
	require.NoError(t, err)
	eng.Step(ctx)
	require.Equal(t, []string{"evict ml/zz-old"}, actor.Calls)
	require.Len(t, n.actsBefore, 51)
	for i, acts := range n.actsBefore[1:] {
		require.Equal(t, 1, acts, "warning %d of the burst went after the due action", i)
	}

	// A second burst, and an action that falls due while it is sent.
	n.onSend = func(sent int) {
		if sent == 60 {
			clock.Advance(6 * time.Minute) // the first burst's grace ends
		}
	}
	burst = nil
	for i := range 50 {
		burst = append(burst, reclaimtest.IdlePod("firing", clock.Now(), "ml", fmt.Sprintf("bb-%02d", i)))
	}
	_, err = eng.Ingest(burst)
	require.NoError(t, err)
	run, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); eng.Run(run, 10*time.Millisecond) }()
	warnings := func() int {
		k := 0
		for _, kind := range n.Kinds() {
			if kind == reclaim.MsgWarning {
				k++
			}
		}
		return k
	}
	require.Eventually(t, func() bool { return actor.Count() >= 51 && warnings() == 101 }, 20*time.Second, 10*time.Millisecond)
	stop()
	<-done
	n.mu.Lock()
	defer n.mu.Unlock()
	last := -1
	for i, m := range n.Sent {
		if m.Kind == reclaim.MsgWarning {
			last = i
		}
	}
	require.GreaterOrEqual(t, n.actsBefore[last], 51, "the first burst's 50 actions went before the last of the second burst's warnings")
}

// slowNotifier takes took of the engine's clock to deliver, as Slack does
// when it answers 429 three times, and updates a message it posted.
type slowNotifier struct {
	*reclaimtest.Notifier
	t       *testing.T
	clock   *fakeclock.Clock
	took    time.Duration
	updates []reclaim.Message
}

func (n *slowNotifier) Send(ctx context.Context, m reclaim.Message, prev map[string]string) (map[string]string, []string, error) {
	if m.Restated {
		require.Contains(n.t, prev, "msg.D1", "the message it posted")
		n.updates = append(n.updates, m)
		return nil, []string{"D1"}, nil
	}
	n.clock.Advance(n.took)
	_, ch, err := n.Notifier.Send(ctx, m, prev)
	return map[string]string{"msg.D1": "1.0"}, ch, err
}

// The grace runs from the delivered warning even when the send itself took
// 36 s: the action moves, and the warning is updated to say when.
func TestGraceRunsFromASlowDelivery(t *testing.T) {
	f := newFixture(t, "")
	clock, actor := f.clock, f.actor
	n := &slowNotifier{Notifier: f.notifier, t: t, clock: clock, took: 36 * time.Second}
	f.with(func(o *lifecycle.Options) { o.Notifiers = []reclaim.Notifier{n} })
	eng := f.eng
	ctx := context.Background()
	_, err := eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0")})
	require.NoError(t, err)
	eng.Step(ctx)
	r := eng.List()[0]
	require.Equal(t, reclaimtest.T0.Add(36*time.Second), r.Warning.At, "delivered 36 s after it was sent")
	require.Equal(t, reclaimtest.T0.Add(36*time.Second+5*time.Minute), r.ActAt, "the whole grace from delivery")
	require.Len(t, n.updates, 1, "the warning restated")
	require.Equal(t, reclaim.MsgWarning, n.updates[0].Kind)
	require.Len(t, n.Kinds(), 1, "nothing new posted")
	require.Contains(t, n.updates[0].Text, reclaimtest.T0.Add(36*time.Second+5*time.Minute).Format(time.RFC3339))

	clock.Advance(5*time.Minute - time.Second)
	eng.Step(ctx)
	require.Zero(t, actor.Count(), "not at the time first stated")
	clock.Advance(time.Second)
	eng.Step(ctx)
	require.Equal(t, 1, actor.Count())
}

// lease stands for the Lease: held or not, and the term's token.
type lease struct {
	mu    sync.Mutex
	lost  bool
	token int64
}

func (l *lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return errors.New("last renewed 20s ago, past the renew deadline")
	}
	return nil
}

func (l *lease) Token() int64           { l.mu.Lock(); defer l.mu.Unlock(); return l.token }
func (l *lease) Fence() (string, int64) { return "test-lease", l.Token() }

func (l *lease) lose() { l.mu.Lock(); l.lost = true; l.mu.Unlock() }

// A replica that may have lost the Lease writes nothing, acts on nothing
// and sends nothing, from the moment it may have: even work it had begun.
// What it wrote while it led carries its term's token.
func TestNoActionWriteOrMessageOnceLeadershipIsInDoubt(t *testing.T) {
	f := newFixture(t, "")
	l := &lease{token: 7}
	f.with(func(o *lifecycle.Options) { o.Leadership = l })
	require.Equal(t, 2, f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-1")).New)
	f.at(0)
	require.Len(t, f.notifier.Kinds(), 2, "both warned")
	for _, r := range f.eng.List() {
		require.EqualValues(t, 7, r.Fence, "written with the term's token")
	}

	l.lose()
	f.at(5 * time.Minute)
	require.Zero(t, f.actor.Count(), "no action")
	require.Len(t, f.notifier.Kinds(), 2, "no message")
	_, err := f.eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-2")})
	require.ErrorIs(t, err, reclaim.ErrNotLeader, "no write: Alertmanager retries on the leader")
	require.Equal(t, 3.0, f.metric("gpureclaim_reclaimer_fenced_total", "what", "write"), "two acting records and the notification")

	// The next leader, on the same store, does it all once.
	f.restart()
	f.at(5 * time.Minute)
	require.Equal(t, []string{"evict ml/nb-0", "evict ml/nb-1"}, sorted(f.actor.Calls))
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// flakyStore fails every write while down, as an unreachable apiserver.
type flakyStore struct {
	reclaim.Store
	mu   sync.Mutex
	down bool
}

func (s *flakyStore) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		return errors.New("the store's API server does not answer")
	}
	return s.Store.Write(rs, evs)
}

func (s *flakyStore) set(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

// A message is not sent before its intent is written, and one sent while
// its record cannot be written (the store went away between the two) is
// not sent again while the store is down: once it is back, the record is
// written.
func TestAMessageSentDuringAStoreOutageIsSentOnce(t *testing.T) {
	f := newFixture(t, "")
	st := &flakyStore{Store: f.st}
	tripped := map[string]bool{}
	f.with(func(o *lifecycle.Options) {
		o.Store = st
		o.Journal, _ = o.Store.(reclaim.Journal)
		o.Failpoint = func(p string) {
			if (p == "before-warning" || p == "before-final") && !tripped[p] {
				tripped[p] = true
				st.set(true) // the intent is written; the record of the send will not be
			}
		}
	})
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"))
	st.set(true)
	f.at(0)
	require.Empty(t, f.notifier.Kinds(), "no intent written: nothing sent")
	st.set(false)
	for s := range 5 {
		f.at(time.Duration(s+1) * time.Second)
	}
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning}, f.notifier.Kinds(), "warned once while the store was down")
	require.False(t, f.only().Warning.Sent, "not recorded yet")
	st.set(false)
	f.at(10 * time.Second)
	require.True(t, f.only().Warning.Sent, "recorded once the store is back")

	f.at(10*time.Second + 5*time.Minute)
	require.Equal(t, reclaim.Done, f.only().State)
	for s := range 5 {
		f.at(10*time.Second + 5*time.Minute + time.Duration(s+1)*time.Second)
	}
	require.False(t, f.only().Final.Sent, "not recorded yet")
	st.set(false)
	f.at(10*time.Second + 6*time.Minute)
	require.True(t, f.only().Final.Sent)
	require.Equal(t, []reclaim.MessageKind{reclaim.MsgWarning, reclaim.MsgReclaimed}, f.notifier.Kinds(), "each message once")
}

// conflictStore answers a write with what another replica stored: every
// reclaim written is found done.
type conflictStore struct {
	reclaim.Store
	on bool
}

func (s *conflictStore) Write(rs []*reclaim.Reclaim, evs []reclaim.Event) error {
	if !s.on {
		return s.Store.Write(rs, evs)
	}
	var errs []error
	for _, r := range rs {
		c := r.Clone()
		c.State, c.Reason = reclaim.Done, "reclaimed by the other replica"
		errs = append(errs, fmt.Errorf("writing %s: %w", r.ID, &reclaim.ConflictError{Stored: c, Cause: errors.New("409")}))
	}
	return errors.Join(errs...)
}

// A write refused because another replica wrote first brings back what the
// store holds, for every reclaim of the write: the engine goes on from it
// and does not act again.
func TestAConflictGoesOnFromTheStore(t *testing.T) {
	f := newFixture(t, "")
	st := &conflictStore{Store: f.st}
	f.with(func(o *lifecycle.Options) { o.Store = st; o.Journal, _ = o.Store.(reclaim.Journal) })
	f.ingest(reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-0"), reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-1"))
	f.at(0)
	st.on = true
	f.at(5 * time.Minute)
	for _, r := range f.eng.List() {
		require.Equal(t, reclaim.Done, r.State, r.ID)
		require.Equal(t, "reclaimed by the other replica", r.Reason)
	}
	require.Zero(t, f.actor.Count(), "nothing acted twice")

	// Both reclaims of one notification come back from one refused write.
	_, err := f.eng.Ingest([]notification.Alert{reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-2"), reclaimtest.IdlePod("firing", reclaimtest.T0, "ml", "nb-3")})
	var conflict *reclaim.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Len(t, f.eng.List(), 4)
	for _, r := range f.eng.List() {
		require.Equal(t, reclaim.Done, r.State, r.ID)
	}
}
