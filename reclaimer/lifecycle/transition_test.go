package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// TestTransition is every move a verdict makes, one row each: where a
// reclaim stands, the verdict, and the whole record and audit trail that
// follow, or nothing written when the verdict no longer applies there.
func TestTransition(t *testing.T) {
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	job := &reclaim.TopOwner{APIVersion: "batch/v1", Kind: "Job", Namespace: "ml", Name: "train", Stop: reclaim.StopPatch}
	bare := &reclaim.TopOwner{}
	target := reclaim.Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "p"}
	base := func(st reclaim.State) *reclaim.Reclaim {
		return &reclaim.Reclaim{ID: "r", Policy: "stop", Action: config.ActionEvict, Target: target, State: st, ActAt: now.Add(-time.Minute)}
	}
	warned := func(st reclaim.State) *reclaim.Reclaim {
		r := base(st)
		r.Warning = reclaim.Delivery{Sent: true, At: now.Add(-time.Hour), Refs: map[string]string{"slack.sent.warning": "1", "slack.msg.C1": "17.1"}}
		return r
	}
	newOne := func(policy string) *reclaim.Reclaim {
		r := base("")
		r.Policy, r.ActAt = policy, time.Time{}
		return r
	}
	acting := func() *reclaim.Reclaim {
		r := warned(reclaim.Acting)
		r.ActedAt, r.ReleaseBy, r.Detail = now.Add(-time.Minute), now.Add(time.Minute), "pod ml/p evicted"
		return r
	}
	released := func() *reclaim.Reclaim {
		r := base(reclaim.Pending)
		r.Warning.Sent, r.ActAt, r.ReleaseAskedBy, r.Reason = true, now, "U1", "released by U1: acting now"
		return r
	}
	snoozed := func() *reclaim.Reclaim {
		r := warned(reclaim.Snoozed)
		r.Snooze, r.NextTry, r.Reason = &reclaim.Snooze{Until: now}, now, "snoozed by U1"
		return r
	}
	type ev struct{ kind, actor string }
	rows := []struct {
		name   string
		from   *reclaim.Reclaim
		v      Verdict
		want   func(*reclaim.Reclaim) // nil: nothing is written
		events []ev
	}{
		// A new episode.
		{"new, no policy: exempt, nothing decided for anyone", newOne(""), Verdict{Do: DoExempt, Why: "no policy matches the alert"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Warning.Sent, r.Final.Sent = reclaim.Exempt, "no policy matches the alert", now, true, true
			}, nil},
		{"new, exempt by the config", newOne("stop"), Verdict{Do: DoExempt, Why: "namespace kube-system is exempt"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Warning.Sent, r.Final.Sent = reclaim.Exempt, "namespace kube-system is exempt", now, true, true
			}, []ev{{"decided", "alertmanager"}}},
		{"new, notify only", newOne("stop"), Verdict{Do: DoNotify, Why: "the policy only notifies"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Final.Sent = reclaim.Notified, "the policy only notifies", now, true
			},
			[]ev{{"decided", "alertmanager"}}},
		{"new, pending its warning for the grace", newOne("stop"), Verdict{Do: DoWarn, Grace: 30 * time.Minute, Why: "warning"},
			func(r *reclaim.Reclaim) {
				r.State, r.ActAt, r.Reason = reclaim.Pending, now.Add(30*time.Minute), "warning"
			},
			[]ev{{"decided", "alertmanager"}}},
		{"new: a wait is no first verdict", newOne("stop"), Verdict{Do: DoWait, Until: later}, nil, nil},

		// Before the warning.
		{"pending: exempt by a keep mark", base(reclaim.Pending), Verdict{Do: DoExempt, Why: "annotated keep"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Warning.Sent, r.Final.Sent = reclaim.Exempt, "annotated keep", now, true, true
			}, []ev{{"exempt", "policy"}}},
		{"released before the warning went: a keep mark still wins", released(), Verdict{Do: DoExempt, Why: "annotated keep"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Final.Sent = reclaim.Exempt, "annotated keep", now, true
			},
			[]ev{{"exempt", "policy"}}},
		{"released before the warning went: the top owner is still recorded", released(), Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: job},
			func(r *reclaim.Reclaim) {
				r.TopOwner, r.Action = job, config.ActionStop
				r.Reason = "warning the owner; " + r.ActionText() + " after the grace period"
			}, []ev{{"decided", "policy"}}},
		{"exempt only before the action", warned(reclaim.Acting), Verdict{Do: DoExempt, Why: "annotated keep"}, nil, nil},
		{"pending: notify only, its top owner recorded", base(reclaim.Pending), Verdict{Do: DoNotify, TopOwner: job, Why: "cannot stop it"},
			func(r *reclaim.Reclaim) {
				r.TopOwner, r.State, r.Closed, r.Final.Sent, r.Reason = job, reclaim.Notified, now, true, "cannot stop it"
			}, []ev{{"decided", "policy"}}},
		{"pending: warn of the action on the top owner", base(reclaim.Pending), Verdict{Do: DoWarn, Action: config.ActionStop, TopOwner: job},
			func(r *reclaim.Reclaim) {
				r.TopOwner, r.Action = job, config.ActionStop
				r.Reason = "warning the owner; " + r.ActionText() + " after the grace period"
			}, []ev{{"decided", "policy"}}},
		{"pending: a bare pod, evicted as decided, tells nothing new", base(reclaim.Pending), Verdict{Do: DoWarn, Action: config.ActionEvict, TopOwner: bare},
			func(r *reclaim.Reclaim) {
				r.TopOwner = bare
				r.Reason = "warning the owner; " + r.ActionText() + " after the grace period"
			}, nil},
		{"pending: no top owner looked up, nothing to record", base(reclaim.Pending), Verdict{Do: DoWarn, Action: config.ActionEvict}, nil, nil},
		{"pending: wait before the warning", base(reclaim.Pending), Verdict{Do: DoWait, Until: later, Why: "cannot look up what owns the pod yet"},
			func(r *reclaim.Reclaim) { r.NextTry, r.Reason = later, "cannot look up what owns the pod yet" }, nil},

		// Warned and due.
		{"warned: the action waits, and the record says when it is due", warned(reclaim.Pending), Verdict{Do: DoWait, Until: later, Why: "outside the policy's windows"},
			func(r *reclaim.Reclaim) { r.ActAt, r.Reason = later, "outside the policy's windows" }, nil},
		{"warned: cancel, and the owner hears of it", warned(reclaim.Pending), Verdict{Do: DoCancel, Why: "the alert no longer fires"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed = reclaim.Cancelled, "the alert no longer fires", now
			},
			[]ev{{"cancelled", "reclaimer"}}},
		{"not warned: a cancel tells nobody", base(reclaim.Pending), Verdict{Do: DoCancel, Why: "the alert resolved", By: "alertmanager"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Final.Sent = reclaim.Cancelled, "the alert resolved", now, true
			},
			[]ev{{"cancelled", "alertmanager"}}},
		{"ended: a cancel comes too late", warned(reclaim.Done), Verdict{Do: DoCancel, Why: "late"}, nil, nil},
		{"warned: silenced in Alertmanager", warned(reclaim.Pending), Verdict{Do: DoSnooze, Silence: reclaim.AlertCheck{Status: reclaim.AlertSilenced, Reason: "silenced by ann", Until: later}, Why: "the alert is silenced: silenced by ann"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Snooze, r.NextTry = reclaim.Snoozed, "the alert is silenced: silenced by ann", &reclaim.Snooze{Until: later}, later
			}, []ev{{"snoozed", ""}}},
		{"acting again: inhibited, looked at again after a while", warned(reclaim.Acting), Verdict{Do: DoSnooze, Silence: reclaim.AlertCheck{Status: reclaim.AlertSilenced, Reason: "inhibited"}, Why: "inhibited"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Snooze, r.NextTry = reclaim.Snoozed, "inhibited", &reclaim.Snooze{}, now.Add(inhibitedWait)
			}, []ev{{"snoozed", ""}}},
		{"acting again: wait", warned(reclaim.Acting), Verdict{Do: DoWait, Until: later, Why: "will try again"},
			func(r *reclaim.Reclaim) { r.NextTry, r.Reason = later, "will try again" }, nil},
		{"nothing to write: act", warned(reclaim.Pending), Verdict{Do: DoAct}, nil, nil},

		// People.
		{"a person snoozes a pending reclaim", warned(reclaim.Pending), Verdict{Do: DoSnooze, By: "U1", Until: later, SilenceID: "s1"},
			func(r *reclaim.Reclaim) {
				r.State, r.Snooze, r.NextTry = reclaim.Snoozed, &reclaim.Snooze{Silence: "s1", By: "U1", Until: later}, later
				r.Reason = "snoozed by U1 until " + later.Format(time.RFC3339)
			}, []ev{{"snoozed", "U1"}}},
		{"a snoozed reclaim is not snoozed again", snoozed(), Verdict{Do: DoSnooze, By: "U2", Until: later, SilenceID: "s2"}, nil, nil},
		{"a person keeps a snoozed reclaim", snoozed(), Verdict{Do: DoKeep, By: "U1", Until: later, SilenceID: "s1"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.Final.Sent = reclaim.Exempt, "kept by U1", now, true
				r.Snooze = &reclaim.Snooze{Silence: "s1", By: "U1", Until: later}
			}, []ev{{"kept", "U1"}}},
		{"keep comes too late for an action under way", acting(), Verdict{Do: DoKeep, By: "U1", Until: later, SilenceID: "s1"}, nil, nil},
		{"a keep needs a person", warned(reclaim.Pending), Verdict{Do: DoKeep, Until: later}, nil, nil},
		{"a person releases it now, before the warning went", base(reclaim.Pending), Verdict{Do: DoReleaseNow, By: "U1"},
			func(r *reclaim.Reclaim) {
				r.ActAt, r.ReleaseAskedBy, r.Warning.Sent, r.Reason = now, "U1", true, "released by U1: acting now"
			}, []ev{{"released", "U1"}}},
		{"a person releases a snoozed reclaim", snoozed(), Verdict{Do: DoReleaseNow, By: "U1"},
			func(r *reclaim.Reclaim) {
				r.State, r.ActAt, r.NextTry, r.ReleaseAskedBy, r.Reason = reclaim.Pending, now, time.Time{}, "U1", "released by U1: acting now"
			}, []ev{{"released", "U1"}}},
		{"release now on an ended reclaim", warned(reclaim.Cancelled), Verdict{Do: DoReleaseNow, By: "U1"}, nil, nil},

		// The snooze over.
		{"snooze over, still idle: a new warning and a new grace", snoozed(), Verdict{Do: DoWarn, Grace: 30 * time.Minute, Why: "warning again"},
			func(r *reclaim.Reclaim) {
				r.State, r.ActAt, r.NextTry, r.Reason, r.WarningRound = reclaim.Pending, now.Add(30*time.Minute), time.Time{}, "warning again", 1
				r.Warning = reclaim.Delivery{Refs: map[string]string{"slack.msg.C1": "17.1"}}
			}, []ev{{"unsnoozed", "reclaimer"}}},
		{"snooze over, silenced still: the reason stands", snoozed(), Verdict{Do: DoWait, Until: later, Why: "cannot re-check the alert"},
			func(r *reclaim.Reclaim) { r.NextTry = later }, nil},

		// Carried out.
		{"released: done, seen now", acting(), Verdict{Do: DoDone, Why: "pod ml/p evicted; the GPU was seen released"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.ReleasedAt = reclaim.Done, "pod ml/p evicted; the GPU was seen released", now, now
			}, []ev{{"done", "reclaimer"}}},
		{"released in part: done, and who still holds it", acting(), Verdict{Do: DoDone, Why: "its share freed", Shared: "pod ml/q"},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.ReleasedAt, r.SharedWith = reclaim.Done, "its share freed", now, now, "pod ml/q"
			}, []ev{{"done", "reclaimer"}}},
		{"not released, the stop left written", acting(), Verdict{Do: DoNotReleased, Why: "still held", StopInPlace: true},
			func(r *reclaim.Reclaim) {
				r.State, r.Reason, r.Closed, r.StopInPlace = reclaim.NotReleased, "still held", now, true
			},
			[]ev{{"not_released", "reclaimer"}}},
		{"done only from acting", warned(reclaim.Pending), Verdict{Do: DoDone, Why: "x"}, nil, nil},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			before := row.from.Clone()
			got, events := transition(row.from, row.v, now)
			require.Equal(t, before, row.from, "transition leaves its input alone")
			if row.want == nil {
				require.Nil(t, got, "nothing is written")
				require.Empty(t, events)
				return
			}
			want := row.from.Clone()
			row.want(want)
			require.Equal(t, want, got)
			var kinds []ev
			for _, e := range events {
				require.Equal(t, reclaim.Event{Time: now, Reclaim: "r", Kind: e.Kind, Target: target.UnitAndHolder(), Detail: e.Detail, Actor: e.Actor}, e)
				kinds = append(kinds, ev{e.Kind, e.Actor})
			}
			require.Equal(t, row.events, kinds)
		})
	}
}

// A button asks the same question the engine's write does.
func TestTakes(t *testing.T) {
	for st, want := range map[reclaim.State][3]bool{
		reclaim.Pending: {true, true, true}, reclaim.Snoozed: {false, true, true}, reclaim.Acting: {false, false, false},
		reclaim.Done: {false, false, false}, reclaim.Exempt: {false, false, false},
	} {
		r := &reclaim.Reclaim{ID: "r", State: st}
		require.Equal(t, want, [3]bool{Takes(r, DoSnooze), Takes(r, DoKeep), Takes(r, DoReleaseNow)}, "%s", st)
	}
}
