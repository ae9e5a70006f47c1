package reclaim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
)

// Clone copies everything, and shares nothing a later change could reach
// through the copy.
func TestCloneIsDeep(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	r := &Reclaim{
		ID: "fp-1", Fingerprint: "fp", StartsAt: now, Labels: labels.FromStrings("a", "b"), Annotations: labels.FromStrings("c", "d"),
		Target: Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "p"}, Policy: "idle", Action: "stop", State: Done,
		Created: now, ActAt: now, ActedAt: now, ActingSince: now,
		Warning:  Delivery{Sent: true, At: now, Refs: map[string]string{"slack.ts": "1"}, Channels: []string{"D0"}},
		Final:    Delivery{Refs: map[string]string{"x": "y"}, Channels: []string{"C0"}},
		TopOwner: &TopOwner{Kind: "Job", Name: "train"},
		Stopped:  &Stopped{Kind: "Job", Name: "train", Stop: StopPatch},
		Killed:   []int{1, 2},
		Snooze:   &Snooze{By: "bob", Until: now},
		Restore:  &Restore{AskedAt: now, AskedBy: "carol"},
	}
	want := *r
	want.Snooze, want.Restore = &Snooze{By: "bob", Until: now}, &Restore{AskedAt: now, AskedBy: "carol"}
	want.Warning.Refs, want.Final.Refs = map[string]string{"slack.ts": "1"}, map[string]string{"x": "y"}
	want.Warning.Channels, want.Killed = []string{"D0"}, []int{1, 2}
	want.TopOwner, want.Stopped = &TopOwner{Kind: "Job", Name: "train"}, &Stopped{Kind: "Job", Name: "train", Stop: StopPatch}
	c := r.Clone()
	require.Equal(t, &want, c, "every field copied")

	c.Warning.Refs["slack.ts"], c.Final.Refs["x"] = "changed", "changed"
	c.Warning.Channels[0], c.Killed[0] = "changed", 99
	c.TopOwner.Name, c.Stopped.Name = "changed", "changed"
	c.Snooze.By, c.Restore.AskedBy = "changed", "changed"
	require.Equal(t, &want, r, "the original is untouched")
}

// The public record holds every field of the engine's: a reclaim stored
// and loaded (as JSON, as both stores keep it) is the same reclaim.
func TestPublicRecordRoundTrip(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 123456000, time.UTC)
	later := now.Add(time.Minute)
	r := &Reclaim{
		ID: "fp-1", Fingerprint: "fp", StartsAt: now, Labels: labels.FromStrings("a", "b"), Annotations: labels.FromStrings("c", "d"),
		Target: Target{Alertname: "GPUIdle", UUID: "MIG-1", GPUUUID: "GPU-1", Node: "n1", Kind: "mig", MIGProfile: "1g.10gb", Namespace: "ml", Pod: "p", Container: "c",
			User: "u", SlurmJob: "7", Keep: true, Suggested: "evict"},
		Policy: "idle", Action: "stop", DryRun: true, State: Done, Reason: "why",
		Created: now, Updated: later, ActAt: later, ActingSince: later, ActedAt: later, ReleaseBy: later, ReleasedAt: later, SharedWith: "pod ml/q",
		Closed: later, NextTry: later, Wanted: true, AwaitsDemand: true,
		Warning:      Delivery{Sent: true, At: now, FirstTry: now, Attempts: 2, Error: "e", Escalated: true, Refs: map[string]string{"slack.ts": "1"}, Channels: []string{"D0"}},
		WarningRound: 2,
		Final:        Delivery{Refs: map[string]string{"x": "y"}, Attempts: 1},
		Attempts:     3, LastError: "boom", Planned: []int{1, 2}, HeldBy: []string{"ml/p/u1"}, Killed: []int{1}, Detail: "done", TargetGone: true, StopInPlace: true, Fence: 7, ReleaseAskedBy: "alice",
		TopOwner: &TopOwner{APIVersion: "ray.io/v1", Kind: "RayCluster", Namespace: "ml", Name: "rc", Replicas: 2, Stop: StopPatch, Stopped: "suspended", Why: "w",
			Above:  &TopOwner{APIVersion: "ray.io/v1", Kind: "RayJob", Namespace: "ml", Name: "rj"},
			Claims: []Claim{{Namespace: "ml", Name: "gpu", Shared: true, Others: []string{"ml/q"}}}},
		Stopped: &Stopped{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ml", Name: "web", Stop: StopScale, PreviousReplicas: 3, ScaledTo: 0, Via: "v", StopVerb: "s", RestoreVerb: "r"},
		Snooze:  &Snooze{Silence: "sil", By: "bob", Until: later},
		Restore: &Restore{AskedAt: later, AskedBy: "carol", Deadline: later, RestoredAt: later, Failed: "f"},
	}
	events := []Event{{Time: now, Reclaim: "fp-1", Kind: "decided", Target: r.Target.Unit() + " held by " + r.Target.Holder(), Detail: "d", Actor: "policy"}}
	b, err := json.Marshal(ToAPI(r, events))
	require.NoError(t, err)
	var g v1alpha1.GPUReclaim
	require.NoError(t, json.Unmarshal(b, &g))
	back, evs, err := FromAPI(&g)
	require.NoError(t, err)
	require.Equal(t, r, back)
	require.Equal(t, events, evs)

	// Every field of the engine's record is in the public one: a field
	// added to Reclaim and not converted leaves it zero here.
	rv := reflect.ValueOf(*back)
	for i := range rv.NumField() {
		require.False(t, rv.Field(i).IsZero(), "Reclaim.%s is lost in the public record", rv.Type().Field(i).Name)
	}
}

// Each state reads as conditions kubectl can wait on.
func TestConditions(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	warned := Delivery{Sent: true, At: t0.Add(time.Minute)}
	for _, c := range []struct {
		name string
		r    Reclaim
		want string // type=status/reason, in order
	}{
		{"warning not yet delivered", Reclaim{State: Pending},
			"Warned=False/NotDelivered Acting=False/Pending Released=Unknown/Pending"},
		{"warned, in its grace", Reclaim{State: Pending, Warning: warned},
			"Warned=True/Delivered Acting=False/Pending Released=Unknown/Pending"},
		{"acting", Reclaim{State: Acting, Warning: warned, ActingSince: t0.Add(20 * time.Minute)},
			"Warned=True/Delivered Acting=True/Acting Released=Unknown/Acting"},
		{"released", Reclaim{State: Done, Warning: warned, ReleasedAt: t0.Add(21 * time.Minute)},
			"Warned=True/Delivered Acting=False/Done Released=True/Done"},
		{"not released", Reclaim{State: NotReleased, Warning: warned, Reason: "the controller ignored the stop"},
			"Warned=True/Delivered Acting=False/NotReleased Released=False/NotReleased"},
		{"cancelled", Reclaim{State: Cancelled, Warning: warned},
			"Warned=True/Delivered Acting=False/Cancelled Released=False/Cancelled"},
		{"resolved before it was seen firing", Reclaim{State: Resolved},
			"Warned=False/NotDelivered Acting=False/Resolved Released=False/Resolved"},
		{"dry run", Reclaim{State: DryRun, Warning: warned},
			"Warned=True/Delivered Acting=False/DryRun Released=False/DryRun"},
		{"restore asked", Reclaim{State: Done, Restore: &Restore{AskedAt: t0, AskedBy: "ana"}},
			"Warned=False/NotDelivered Acting=False/Done Released=True/Done Restored=Unknown/Asked"},
		{"restored", Reclaim{State: Done, Restore: &Restore{AskedAt: t0, RestoredAt: t0.Add(time.Minute)}},
			"Warned=False/NotDelivered Acting=False/Done Released=True/Done Restored=True/Running"},
		{"restore failed", Reclaim{State: Done, Restore: &Restore{AskedAt: t0, Failed: "no pod ran by the deadline"}},
			"Warned=False/NotDelivered Acting=False/Done Released=True/Done Restored=False/Failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			r.ID, r.Created, r.Updated = "x", t0, t0
			var got []string
			for _, cond := range ToAPI(&r, nil).Status.Conditions {
				require.False(t, cond.LastTransitionTime.IsZero(), "%s: the CRD requires a time", cond.Type)
				require.NotEmpty(t, cond.Message, cond.Type)
				got = append(got, fmt.Sprintf("%s=%s/%s", cond.Type, cond.Status, cond.Reason))
			}
			require.Equal(t, c.want, strings.Join(got, " "))
		})
	}
}
