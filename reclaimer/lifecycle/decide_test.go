package lifecycle

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// TestDecide is every decision the reclaimer takes, one row each: what a
// reclaim, its policy and the facts looked up so far make of it.
func TestDecide(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("t0ken\n"), 0o600))
	cfg, err := config.Parse([]byte(`
webhook: {bearer_token_file: token}
web: {auth: {none: true}}
alertmanager: {url: "http://127.0.0.1:9093"}
prometheus: {url: "http://127.0.0.1:9090", interval: 1m}
exemptions: {namespaces: [kube-system]}
rate_limits: {global: {max: 3, per: 1h}, per_namespace: {max: 1, per: 1h}}
policies:
- {name: stop, matchers: ['alertname="GPUIdle"'], action: stop, grace: 30m}
- {name: notify, matchers: ['x="notify"'], action: notify}
- {name: evict, matchers: ['x="evict"'], action: evict, grace: 30m}
- {name: auto, matchers: ['x="auto"'], action: auto, grace: 30m}
- {name: windowed, matchers: ['x="windowed"'], action: stop, grace: 30m, windows: [{from: "22:00", to: "23:00"}]}
- {name: min-runtime, matchers: ['x="min"'], action: stop, grace: 30m, min_runtime: 2h}
- {name: demand-grace, matchers: ['x="dg"'], action: stop, grace: 30m, demand: {grace: 5m}}
- {name: demand-required, matchers: ['x="dr"'], action: stop, grace: 30m, demand: {required: true}}
`), dir)
	require.NoError(t, err)

	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	pod := reclaim.Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "p"}
	job := reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train", Stop: reclaim.StopPatch}
	web := reclaim.TopOwner{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ml", Name: "web", Stop: reclaim.StopScale, Replicas: 3}
	operator := reclaim.TopOwner{APIVersion: "x.io/v1", Kind: "Thing", Namespace: "ml", Name: "t", Stop: reclaim.StopNone, Why: "the reclaimer does not know how to stop a Thing"}

	// fine is every fact, none holding the action back.
	fine := func() Facts {
		return Facts{Now: now,
			Kept: &Fact[Keep]{}, TopOwner: &Fact[reclaim.TopOwner]{Value: job}, Wanted: &Fact[bool]{Value: true}, Breaker: &Fact[bool]{},
			Started: &Fact[time.Time]{Value: now.Add(-24 * time.Hour)}, Acted: &Fact[Acted]{}, Alert: &Fact[reclaim.AlertCheck]{Value: reclaim.AlertCheck{Status: reclaim.AlertActive}}}
	}
	with := func(change func(*Facts)) Facts {
		f := fine()
		change(&f)
		return f
	}
	newOf := func(policy string, action config.Action, t reclaim.Target) *reclaim.Reclaim {
		return &reclaim.Reclaim{ID: "r", Policy: policy, Action: action, Target: t}
	}
	unwarned := func(policy string, action config.Action) *reclaim.Reclaim {
		return &reclaim.Reclaim{ID: "r", Policy: policy, Action: action, Target: pod, State: reclaim.Pending}
	}
	due := func(policy string) *reclaim.Reclaim {
		r := unwarned(policy, config.ActionStop)
		r.Warning.Sent, r.TopOwner = true, &job
		return r
	}
	released := func(policy string) *reclaim.Reclaim {
		r := due(policy)
		r.ReleaseAskedBy = "alice"
		return r
	}
	snoozed := func(policy string) *reclaim.Reclaim {
		r := due(policy)
		r.State = reclaim.Snoozed
		return r
	}
	carriedOut := func(labels labels.Labels) *reclaim.Reclaim {
		r := due("stop")
		r.State, r.Labels, r.Detail = reclaim.Acting, labels, "Job ml/train suspended"
		r.ActedAt, r.ReleaseBy = now.Add(-3*time.Second), now.Add(5*time.Minute)
		return r
	}
	pastDeadline := carriedOut(labels.EmptyLabels())
	pastDeadline.ActedAt, pastDeadline.ReleaseBy = now.Add(-5*time.Minute), now.Add(-time.Second)
	silence := reclaim.AlertCheck{Status: reclaim.AlertSilenced, Reason: "bob: until the demo", Until: now.Add(time.Hour)}
	grace := 30 * time.Minute

	for _, tc := range []struct {
		name   string
		r      *reclaim.Reclaim
		policy string // "" for none
		facts  Facts
		want   Verdict
	}{
		// A new episode: config alone.
		{"new, no policy matches", newOf("", "", pod), "", Facts{Now: now},
			Verdict{Do: DoExempt, Why: "no policy matches the alert", Decision: reclaim.DecisionNoPolicy}},
		{"new, exempt namespace", newOf("stop", config.ActionStop, reclaim.Target{Namespace: "kube-system", Pod: "dns"}), "stop", Facts{Now: now},
			Verdict{Do: DoExempt, Why: "namespace kube-system is exempt", Decision: reclaim.DecisionExempt}},
		{"new, keep label on the alert", newOf("stop", config.ActionStop, reclaim.Target{Namespace: "ml", Pod: "p", Keep: true}), "stop", Facts{Now: now},
			Verdict{Do: DoExempt, Why: "marked gpureclaim.io/keep", Decision: reclaim.DecisionExempt}},
		{"new, notify-only policy", newOf("notify", config.ActionNotify, pod), "notify", Facts{Now: now},
			Verdict{Do: DoNotify, Action: config.ActionNotify, Why: "the policy only notifies", Decision: reclaim.DecisionNotify}},
		{"new, pending its warning", newOf("stop", config.ActionStop, pod), "stop", Facts{Now: now},
			Verdict{Do: DoWarn, Action: config.ActionStop, Grace: grace, Why: "warning the owner; reclaim after the grace period", Decision: reclaim.DecisionPending}},

		// Before the warning.
		{"warning, keep mark not looked up", unwarned("stop", config.ActionStop), "stop", Facts{Now: now},
			Verdict{Do: DoGather, Need: NeedKept}},
		{"warning, kept", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.Kept.Value = Keep{Kept: true, Why: "pod ml/p is annotated gpureclaim.io/keep"} }),
			Verdict{Do: DoExempt, Why: "pod ml/p is annotated gpureclaim.io/keep", Decision: reclaim.DecisionExempt}},
		{"warning, the keep lookup failed: not kept", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.Kept.Err = boom }),
			Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: &job, Grace: grace}},
		{"warning, top owner not looked up", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.TopOwner = nil }),
			Verdict{Do: DoGather, Need: NeedTopOwner}},
		{"warning, top owner lookup failed", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.TopOwner.Err = boom }),
			Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot look up what owns the pod yet: boom"}},
		{"warning, the pod is gone: the action finds it so", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.TopOwner.Err = reclaim.ErrGone }),
			Verdict{Do: DoWarn, Action: config.ActionStop, Grace: grace}},
		{"warning, nothing to look the top owner up with", unwarned("evict", config.ActionEvict), "evict", with(func(f *Facts) { f.TopOwner.Err = errNothingToAsk }),
			Verdict{Do: DoWarn, Action: config.ActionEvict, Grace: grace}},
		{"warning, a process: no top owner", &reclaim.Reclaim{ID: "r", Policy: "stop", Action: config.ActionKill, Target: reclaim.Target{UUID: "GPU-1", Node: "n1", User: "alice"}, State: reclaim.Pending}, "stop",
			with(func(f *Facts) { f.TopOwner = nil }),
			Verdict{Do: DoWarn, Action: config.ActionKill, Grace: grace}},
		{"warning, top owner known from an earlier attempt", func() *reclaim.Reclaim { r := unwarned("stop", config.ActionStop); r.TopOwner = &job; return r }(), "stop",
			with(func(f *Facts) { f.TopOwner = nil }),
			Verdict{Do: DoWarn, Action: config.ActionStop, Grace: grace}},
		{"warning, a Job is stopped as its controller expects", unwarned("stop", config.ActionStop), "stop", fine(),
			Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: &job, Grace: grace}},
		{"warning, a Deployment is scaled down", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.TopOwner.Value = web }),
			Verdict{Do: DoWarn, Action: config.ActionScaleDown, TopOwner: &web, Grace: grace}},
		{"warning, a bare pod is evicted", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.TopOwner.Value = reclaim.TopOwner{} }),
			Verdict{Do: DoWarn, Action: config.ActionEvict, TopOwner: &reclaim.TopOwner{}, Grace: grace}},
		{"warning, a bare pod cannot be scaled down", unwarned("stop", config.ActionScaleDown), "stop", with(func(f *Facts) { f.TopOwner.Value = reclaim.TopOwner{} }),
			Verdict{Do: DoNotify, Action: config.ActionNotify, TopOwner: &reclaim.TopOwner{}, Decision: reclaim.DecisionNotify,
				Why: "pod ml/p has no controller to scale down; the policy asks for scale_down, so the owner is told"}},
		{"warning, a top owner the reclaimer cannot stop", unwarned("stop", config.ActionStop), "stop", with(func(f *Facts) { f.TopOwner.Value = operator }),
			Verdict{Do: DoNotify, Action: config.ActionNotify, TopOwner: &operator, Why: "the reclaimer does not know how to stop a Thing", Decision: reclaim.DecisionNotify}},
		{"warning, evicting a Job's pod would be undone", unwarned("evict", config.ActionEvict), "evict", fine(),
			Verdict{Do: DoNotify, Action: config.ActionNotify, TopOwner: &job, Decision: reclaim.DecisionNotify,
				Why: "Job ml/train runs the pod and would start another if it were evicted; the policy asks for evict, so the owner is told (use action stop or auto)"}},
		{"warning, auto on one of several busy replicas", unwarned("auto", config.ActionEvict), "auto", with(func(f *Facts) { f.TopOwner.Value = web }),
			Verdict{Do: DoNotify, Action: config.ActionNotify, TopOwner: &web, Decision: reclaim.DecisionNotify,
				Why: "one of 3 replicas of Deployment ml/web: an eviction would be replaced and a scale-down would stop busy replicas too; telling the owner only"}},
		{"warning, its policy left the config", unwarned("gone", config.ActionStop), "", fine(),
			Verdict{Do: DoWarn, Action: config.ActionStop}},
		{"warning, demand not looked up", unwarned("demand-grace", config.ActionStop), "demand-grace", with(func(f *Facts) { f.Wanted = nil }),
			Verdict{Do: DoGather, Need: NeedWanted}},
		{"warning, GPUs of the kind wanted: the shorter grace", unwarned("demand-grace", config.ActionStop), "demand-grace", fine(),
			Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: &job, Grace: 5 * time.Minute, Wanted: true}},
		{"warning, none wanted: the whole grace", unwarned("demand-grace", config.ActionStop), "demand-grace", with(func(f *Facts) { f.Wanted.Value = false }),
			Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: &job, Grace: grace}},
		{"warning, demand unknown: the whole grace", unwarned("demand-grace", config.ActionStop), "demand-grace", with(func(f *Facts) { f.Wanted.Err = boom }),
			Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: &job, Grace: grace}},

		// Warned, and the action is due.
		{"due, breaker not looked at", due("stop"), "stop", Facts{Now: now},
			Verdict{Do: DoGather, Need: NeedBreaker}},
		{"due, the circuit breaker is open", due("stop"), "stop", with(func(f *Facts) { f.Breaker.Value = true }),
			Verdict{Do: DoWait, Until: now.Add(heldWait), Why: "held: the circuit breaker is open"}},
		{"due, its policy left the config", due("gone"), "", fine(),
			Verdict{Do: DoCancel, Why: "its policy is gone from the config"}},
		{"due, outside the policy's windows", due("windowed"), "windowed", fine(),
			Verdict{Do: DoWait, Until: time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC), Why: "outside the policy's windows; next at 2026-12-02T22:00:00Z", Decision: reclaim.DecisionOutsideWindow}},
		{"due, start time not looked up", due("min-runtime"), "min-runtime", with(func(f *Facts) { f.Started = nil }),
			Verdict{Do: DoGather, Need: NeedStarted}},
		{"due, the workload is gone", due("min-runtime"), "min-runtime", with(func(f *Facts) { f.Started.Err = reclaim.ErrGone }),
			Verdict{Do: DoCancel, Why: "the workload is gone"}},
		{"due, the start time cannot be told", due("min-runtime"), "min-runtime", with(func(f *Facts) { f.Started.Err = boom }),
			Verdict{Do: DoWait, Until: now.Add(heldWait), Why: "cannot tell when the workload started: boom"}},
		{"due, not run its minimum yet", due("min-runtime"), "min-runtime", with(func(f *Facts) { f.Started.Value = now.Add(-30 * time.Minute) }),
			Verdict{Do: DoWait, Until: now.Add(90 * time.Minute), Why: "the workload started 30m0s ago; the policy spares it until it has run 2h0m0s", Decision: reclaim.DecisionMinRuntime}},
		{"due, nothing tells the start: not held", due("min-runtime"), "min-runtime", with(func(f *Facts) { f.Started.Value = time.Time{} }),
			Verdict{Do: DoAct, Action: config.ActionStop}},
		{"due, actions taken not looked at", due("stop"), "stop", with(func(f *Facts) { f.Acted = nil }),
			Verdict{Do: DoGather, Need: NeedActed}},
		{"due, the fleet's rate limit", due("stop"), "stop",
			with(func(f *Facts) {
				f.Acted.Value.Fleet = []time.Time{now.Add(-50 * time.Minute), now.Add(-20 * time.Minute), now.Add(-10 * time.Minute)}
			}),
			Verdict{Do: DoWait, Until: now.Add(10 * time.Minute), Why: "held by the global rate limit", Decision: reclaim.DecisionRateLimited}},
		{"due, the namespace's rate limit", due("stop"), "stop",
			with(func(f *Facts) {
				f.Acted.Value = Acted{Fleet: []time.Time{now.Add(-5 * time.Minute)}, Namespace: []time.Time{now.Add(-5 * time.Minute)}}
			}),
			Verdict{Do: DoWait, Until: now.Add(55 * time.Minute), Why: "held by the rate limit of namespace ml", Decision: reclaim.DecisionRateLimited}},
		{"due, demand required, not looked up", due("demand-required"), "demand-required", with(func(f *Facts) { f.Wanted = nil }),
			Verdict{Do: DoGather, Need: NeedWanted}},
		{"due, demand required, unknown", due("demand-required"), "demand-required", with(func(f *Facts) { f.Wanted.Err = boom }),
			Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot tell whether GPUs of its kind are wanted: boom"}},
		{"due, demand required, none wanted", due("demand-required"), "demand-required", with(func(f *Facts) { f.Wanted.Value = false }),
			Verdict{Do: DoWait, Until: now.Add(time.Minute), Why: "waiting until a GPU of its kind is wanted: no pending work asks for one", Decision: reclaim.DecisionNoDemand}},
		{"due, alert not re-checked", due("stop"), "stop", with(func(f *Facts) { f.Alert = nil }),
			Verdict{Do: DoGather, Need: NeedAlert}},
		{"due, Alertmanager unreachable", due("stop"), "stop", with(func(f *Facts) { f.Alert.Err = boom }),
			Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot re-check the alert in Alertmanager: boom"}},
		{"due, the alert resolved", due("stop"), "stop", with(func(f *Facts) { f.Alert.Value.Status = reclaim.AlertGone }),
			Verdict{Do: DoCancel, Why: "the alert no longer fires: the GPU is busy again or was released"}},
		{"due, the alert is silenced", due("stop"), "stop", with(func(f *Facts) { f.Alert.Value = silence }),
			Verdict{Do: DoSnooze, Silence: silence, Why: "the alert is silenced: bob: until the demo", Decision: reclaim.DecisionSnoozed}},
		// A keep placed during the grace is read last, after the alert.
		{"due, keep not looked up since the warning", due("stop"), "stop", with(func(f *Facts) { f.Kept = nil }),
			Verdict{Do: DoGather, Need: NeedKept}},
		{"due, kept during the grace: cancelled", due("stop"), "stop",
			with(func(f *Facts) { f.Kept.Value = Keep{Kept: true, Why: "Deployment ml/web is marked gpureclaim.io/keep"} }),
			Verdict{Do: DoCancel, Why: "kept: Deployment ml/web is marked gpureclaim.io/keep", Decision: reclaim.DecisionExempt}},
		{"due, keep cannot be checked: waits", due("stop"), "stop", with(func(f *Facts) { f.Kept.Err = boom }),
			Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot check whether a person keeps it: boom"}},
		{"due, its namespace exempted since the warning: cancelled", func() *reclaim.Reclaim { r := due("stop"); r.Target.Namespace = "kube-system"; return r }(), "stop", fine(),
			Verdict{Do: DoCancel, Why: "namespace kube-system is exempt", Decision: reclaim.DecisionExempt}},
		{"released, then kept: the keep wins", released("stop"), "stop",
			with(func(f *Facts) { f.Kept.Value = Keep{Kept: true, Why: "namespace ml is marked gpureclaim.io/keep"} }),
			Verdict{Do: DoCancel, Why: "kept: namespace ml is marked gpureclaim.io/keep", Decision: reclaim.DecisionExempt}},
		{"due, everything holds: act", due("stop"), "stop", fine(),
			Verdict{Do: DoAct, Action: config.ActionStop}},
		{"due again after a failed attempt: checked again", func() *reclaim.Reclaim { r := due("stop"); r.State = reclaim.Acting; return r }(), "stop", with(func(f *Facts) { f.Alert.Value.Status = reclaim.AlertGone }),
			Verdict{Do: DoCancel, Why: "the alert no longer fires: the GPU is busy again or was released"}},

		// The owner pressed release: windows, minimum runtime, limits,
		// demand and their own snooze do not hold it.
		{"released, outside the windows: acts", released("windowed"), "windowed", fine(),
			Verdict{Do: DoAct, Action: config.ActionStop}},
		{"released, not run its minimum: acts", released("min-runtime"), "min-runtime", with(func(f *Facts) { f.Started = nil }),
			Verdict{Do: DoAct, Action: config.ActionStop}},
		{"released, silenced: acts", released("stop"), "stop", with(func(f *Facts) { f.Alert.Value = silence; f.Acted = nil }),
			Verdict{Do: DoAct, Action: config.ActionStop}},
		{"released, the episode ended: cancelled", released("stop"), "stop", with(func(f *Facts) { f.Alert.Value.Status = reclaim.AlertGone }),
			Verdict{Do: DoCancel, Why: "the alert no longer fires: the GPU is busy again or was released"}},
		{"released, the breaker still holds it", released("stop"), "stop", with(func(f *Facts) { f.Breaker.Value = true }),
			Verdict{Do: DoWait, Until: now.Add(heldWait), Why: "held: the circuit breaker is open"}},

		// Snoozed, the silence over.
		{"snoozed, alert not re-checked", snoozed("stop"), "stop", with(func(f *Facts) { f.Alert = nil }),
			Verdict{Do: DoGather, Need: NeedAlert}},
		{"snoozed, Alertmanager unreachable", snoozed("stop"), "stop", with(func(f *Facts) { f.Alert.Err = boom }),
			Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot re-check the alert in Alertmanager: boom"}},
		{"snoozed, silenced again", snoozed("stop"), "stop", with(func(f *Facts) { f.Alert.Value = silence }),
			Verdict{Do: DoSnooze, Silence: silence, Why: "the alert is silenced: bob: until the demo", Decision: reclaim.DecisionSnoozed}},
		{"snoozed, resolved meanwhile", snoozed("stop"), "stop", with(func(f *Facts) { f.Alert.Value.Status = reclaim.AlertGone }),
			Verdict{Do: DoCancel, Why: "the alert resolved while it was snoozed"}},
		{"snoozed, its policy left the config", snoozed("gone"), "", fine(),
			Verdict{Do: DoCancel, Why: "its policy is gone from the config"}},
		{"snoozed, still idle: warned again", snoozed("stop"), "stop", fine(),
			Verdict{Do: DoWarn, Grace: grace, Why: "the snooze ended and the unit is still idle: warning the owner again"}},

		// Carried out: done only once the world shows the GPU free.
		{"carried out, not looked at yet", carriedOut(labels.EmptyLabels()), "stop", fine(),
			Verdict{Do: DoGather, Need: NeedRelease}},
		{"carried out, released", carriedOut(labels.EmptyLabels()), "stop", with(func(f *Facts) { f.Release = &Fact[reclaim.Release]{Value: reclaim.Release{Done: true}} }),
			Verdict{Do: DoDone}},
		{"carried out, its share of a shared claim freed", carriedOut(labels.EmptyLabels()), "stop",
			with(func(f *Facts) {
				f.Release = &Fact[reclaim.Release]{Value: reclaim.Release{Done: true, Shared: "pod ml/other"}}
			}),
			Verdict{Do: DoDone, Shared: "pod ml/other"}},
		{"carried out, one holder of several: a share", carriedOut(labels.FromStrings("signal", "holder_sm_utilization")), "stop",
			with(func(f *Facts) { f.Release = &Fact[reclaim.Release]{Value: reclaim.Release{Done: true}} }),
			Verdict{Do: DoDone, Shared: "its other holders, busy with their own work when it was warned"}},
		{"carried out, still held: look again soon", carriedOut(labels.EmptyLabels()), "stop",
			with(func(f *Facts) {
				f.Release = &Fact[reclaim.Release]{Value: reclaim.Release{Why: "held by pod ml/train-0 (Running)"}}
			}),
			Verdict{Do: DoWait, Until: now.Add(3 * time.Second), Why: "carried out; waiting for the GPU to be released: held by pod ml/train-0 (Running)"}},
		{"carried out, still held past the deadline", pastDeadline, "stop",
			with(func(f *Facts) {
				f.Release = &Fact[reclaim.Release]{Value: reclaim.Release{Why: "held by pod ml/train-0 (Running)"}}
			}),
			Verdict{Do: DoNotReleased, Why: "Job ml/train suspended, but 5m0s later the GPU is still held: held by pod ml/train-0 (Running)"}},

		{"nothing to decide once done", &reclaim.Reclaim{ID: "r", State: reclaim.Done}, "stop", fine(),
			Verdict{Do: DoWait, Until: now, Why: "nothing to decide in state done"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *config.Policy
			if tc.policy != "" {
				p = cfg.Policy(tc.policy)
				require.NotNil(t, p, "policy %s", tc.policy)
			}
			require.Equal(t, tc.want, decide(tc.r, p, cfg, tc.facts))
		})
	}
}
