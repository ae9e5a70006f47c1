package reclaim

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// The engine keeps its own record of a reclaim (Reclaim); what it stores
// and serves is the public one (v1alpha1.GPUReclaim), converted here, at
// the boundary.

// ToAPI is a reclaim's public record, with its audit events.
func ToAPI(r *Reclaim, events []Event) *v1alpha1.GPUReclaim {
	t := r.Target
	g := &v1alpha1.GPUReclaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: r.ID},
		Spec: v1alpha1.GPUReclaimSpec{
			Target: v1alpha1.Target{Alertname: t.Alertname, UUID: t.UUID, GPUUUID: t.GPUUUID, Node: t.Node, Kind: t.Kind, MIGProfile: t.MIGProfile,
				Namespace: t.Namespace, Pod: t.Pod, Container: t.Container, User: t.User, SlurmJob: t.SlurmJob, Keep: t.Keep, SuggestedAction: string(t.Suggested)},
			Policy:  r.Policy,
			Episode: v1alpha1.Episode{Fingerprint: r.Fingerprint, StartsAt: metav1.NewMicroTime(r.StartsAt), Labels: labelMap(r.Labels), Annotations: labelMap(r.Annotations)},
		},
		Status: v1alpha1.GPUReclaimStatus{
			State: v1alpha1.State(r.State), Reason: r.Reason, Holder: t.Holder(), Unit: t.Unit(), Action: string(r.Action), DryRun: r.DryRun,
			Created: at(r.Created), Updated: at(r.Updated), ActAt: at(r.ActAt), ActingSince: at(r.ActingSince), ActedAt: at(r.ActedAt),
			ReleaseBy: at(r.ReleaseBy), ReleasedAt: at(r.ReleasedAt), SharedWith: r.SharedWith, Closed: at(r.Closed), NextTry: at(r.NextTry),
			Wanted: r.Wanted, AwaitsDemand: r.AwaitsDemand,
			Warning: deliveryToAPI(r.Warning), WarningRound: r.WarningRound, Final: deliveryToAPI(r.Final),
			Attempts: r.Attempts, LastError: r.LastError, Planned: r.Planned, HeldBy: r.HeldBy, Killed: r.Killed, Detail: r.Detail, TargetGone: r.TargetGone, StopInPlace: r.StopInPlace, Fence: r.Fence,
			ReleaseAskedBy: r.ReleaseAskedBy,
		},
	}
	st := &g.Status
	if o := r.TopOwner; o != nil {
		st.TopOwner = &v1alpha1.TopOwner{ObjectRef: ref(o.APIVersion, o.Kind, o.Namespace, o.Name), Replicas: o.Replicas, Stop: o.Stop, Stopped: o.Stopped, Why: o.Why}
		if a := o.Above; a != nil {
			above := ref(a.APIVersion, a.Kind, a.Namespace, a.Name)
			st.TopOwner.Above = &above
		}
		for _, c := range o.Claims {
			st.TopOwner.Claims = append(st.TopOwner.Claims, v1alpha1.Claim{Namespace: c.Namespace, Name: c.Name, Shared: c.Shared, Others: c.Others})
		}
	}
	if w := r.Stopped; w != nil {
		st.Workload = &v1alpha1.Workload{ObjectRef: ref(w.APIVersion, w.Kind, w.Namespace, w.Name), Stop: w.Stop, PreviousReplicas: w.PreviousReplicas,
			ScaledTo: w.ScaledTo, Via: w.Via, Stopped: w.StopVerb, Restored: w.RestoreVerb}
	}
	if s := r.Snooze; s != nil {
		st.Snooze = &v1alpha1.Snooze{Silence: s.Silence, By: s.By, Until: at(s.Until)}
	}
	if rs := r.Restore; rs != nil {
		st.Restore = &v1alpha1.Restore{AskedAt: metav1.NewMicroTime(rs.AskedAt), AskedBy: rs.AskedBy, Deadline: at(rs.Deadline),
			RestoredAt: at(rs.RestoredAt), Failed: rs.Failed}
	}
	for _, e := range events {
		st.Events = append(st.Events, v1alpha1.Event{Time: metav1.NewMicroTime(e.Time), Kind: e.Kind, Detail: e.Detail, Actor: e.Actor})
	}
	st.Conditions = conditions(r)
	return g
}

// conditions are a reclaim's state as Kubernetes conditions, so that
// `kubectl wait --for=condition=Released` waits on it: Warned (the
// owner's warning was delivered; the grace runs from it), Acting (the
// action is under way), Released (the world showed the GPU released;
// False once the reclaim ended otherwise, Unknown until then) and, once
// a restore was asked, Restored.
func conditions(r *Reclaim) []metav1.Condition {
	since := func(ts ...time.Time) metav1.Time {
		for _, t := range ts {
			if !t.IsZero() {
				return metav1.NewTime(t)
			}
		}
		return metav1.NewTime(r.Created)
	}
	state, ok := stateReasons[r.State]
	if !ok {
		state = stateReason(r.State) // resolved, which no gauge counts
	}
	out := make([]metav1.Condition, 0, 4)
	warned := metav1.Condition{Type: v1alpha1.ConditionWarned, Status: metav1.ConditionFalse, Reason: "NotDelivered", Message: "the owner has not been warned", LastTransitionTime: since(r.Created)}
	if r.Warning.Sent && !r.Warning.At.IsZero() {
		warned.Status, warned.Reason, warned.Message, warned.LastTransitionTime = metav1.ConditionTrue, "Delivered", "the owner was warned; the grace runs from the delivery", since(r.Warning.At)
	}
	out = append(out, warned)
	acting := metav1.Condition{Type: v1alpha1.ConditionActing, Status: metav1.ConditionFalse, Reason: state, Message: string(r.State), LastTransitionTime: since(r.ActingSince, r.Updated)}
	if r.State == Acting {
		acting.Status, acting.Message = metav1.ConditionTrue, "the action "+string(r.Action)+" is under way"
	}
	out = append(out, acting)
	released := metav1.Condition{Type: v1alpha1.ConditionReleased, Status: metav1.ConditionUnknown, Reason: state, Message: "not decided yet", LastTransitionTime: since(r.Updated)}
	switch {
	case r.State == Done:
		released.Status, released.Message, released.LastTransitionTime = metav1.ConditionTrue, "the GPU was seen released", since(r.ReleasedAt, r.Closed)
	case r.State.Terminal():
		released.Status, released.Message, released.LastTransitionTime = metav1.ConditionFalse, nonEmpty(r.Reason, string(r.State)), since(r.Closed, r.Updated)
	}
	out = append(out, released)
	if rs := r.Restore; rs != nil {
		restored := metav1.Condition{Type: v1alpha1.ConditionRestored, Status: metav1.ConditionUnknown, Reason: "Asked", Message: "asked by " + rs.AskedBy, LastTransitionTime: since(rs.AskedAt)}
		switch {
		case !rs.RestoredAt.IsZero():
			restored.Status, restored.Reason, restored.LastTransitionTime = metav1.ConditionTrue, "Running", since(rs.RestoredAt)
		case rs.Failed != "":
			restored.Status, restored.Reason, restored.Message = metav1.ConditionFalse, "Failed", rs.Failed
		}
		out = append(out, restored)
	}
	return out
}

// stateReasons are the states as conditions' reasons, made once: every
// write of a record derives its conditions.
var stateReasons = func() map[State]string {
	m := make(map[State]string, len(States))
	for _, s := range States {
		m[s] = stateReason(s)
	}
	return m
}()

// stateReason is a state as a condition's reason: not_released is
// NotReleased.
func stateReason(s State) string {
	var b strings.Builder
	for _, w := range strings.Split(string(s), "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

func nonEmpty(s, otherwise string) string {
	if s != "" {
		return s
	}
	return otherwise
}

// FromAPI reads a reclaim and its audit events back from its public
// record.
func FromAPI(g *v1alpha1.GPUReclaim) (*Reclaim, []Event, error) {
	if g.Name == "" {
		return nil, nil, fmt.Errorf("a %s without a name", v1alpha1.Kind)
	}
	r := fromAPI(g)
	var events []Event
	for _, e := range g.Status.Events {
		events = append(events, Event{Time: e.Time.UTC(), Kind: e.Kind, Detail: e.Detail, Actor: e.Actor})
	}
	return r, Owned(r, events), nil
}

// Owned gives events read from a reclaim's record the reclaim and target
// they belong to, which the record does not repeat.
func Owned(r *Reclaim, events []Event) []Event {
	for i := range events {
		events[i].Reclaim, events[i].Target = r.ID, r.Target.UnitAndHolder()
	}
	return events
}

func fromAPI(g *v1alpha1.GPUReclaim) *Reclaim {
	t, ep, st := g.Spec.Target, g.Spec.Episode, &g.Status
	r := &Reclaim{
		ID: g.Name, Fingerprint: ep.Fingerprint, StartsAt: ep.StartsAt.UTC(), Labels: labels.FromMap(ep.Labels), Annotations: labels.FromMap(ep.Annotations),
		Target: Target{Alertname: t.Alertname, UUID: t.UUID, GPUUUID: t.GPUUUID, Node: t.Node, Kind: t.Kind, MIGProfile: t.MIGProfile,
			Namespace: t.Namespace, Pod: t.Pod, Container: t.Container, User: t.User, SlurmJob: t.SlurmJob, Keep: t.Keep, Suggested: config.Action(t.SuggestedAction)},
		Policy: g.Spec.Policy, Action: config.Action(st.Action), DryRun: st.DryRun, State: State(st.State), Reason: st.Reason,
		Created: tm(st.Created), Updated: tm(st.Updated), ActAt: tm(st.ActAt), ActingSince: tm(st.ActingSince), ActedAt: tm(st.ActedAt),
		ReleaseBy: tm(st.ReleaseBy), ReleasedAt: tm(st.ReleasedAt), SharedWith: st.SharedWith, Closed: tm(st.Closed), NextTry: tm(st.NextTry),
		Wanted: st.Wanted, AwaitsDemand: st.AwaitsDemand,
		Warning: deliveryFromAPI(st.Warning), WarningRound: st.WarningRound, Final: deliveryFromAPI(st.Final),
		Attempts: st.Attempts, LastError: st.LastError, Planned: st.Planned, HeldBy: st.HeldBy, Killed: st.Killed, Detail: st.Detail, TargetGone: st.TargetGone, StopInPlace: st.StopInPlace, Fence: st.Fence,
		ReleaseAskedBy: st.ReleaseAskedBy,
	}
	if o := st.TopOwner; o != nil {
		r.TopOwner = &TopOwner{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Replicas: o.Replicas, Stop: o.Stop, Stopped: o.Stopped, Why: o.Why}
		if a := o.Above; a != nil {
			r.TopOwner.Above = &TopOwner{APIVersion: a.APIVersion, Kind: a.Kind, Namespace: a.Namespace, Name: a.Name}
		}
		for _, c := range o.Claims {
			r.TopOwner.Claims = append(r.TopOwner.Claims, Claim{Namespace: c.Namespace, Name: c.Name, Shared: c.Shared, Others: c.Others})
		}
	}
	if w := st.Workload; w != nil {
		r.Stopped = &Stopped{APIVersion: w.APIVersion, Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, Stop: w.Stop, PreviousReplicas: w.PreviousReplicas,
			ScaledTo: w.ScaledTo, Via: w.Via, StopVerb: w.Stopped, RestoreVerb: w.Restored}
	}
	if s := st.Snooze; s != nil {
		r.Snooze = &Snooze{Silence: s.Silence, By: s.By, Until: tm(s.Until)}
	}
	if rs := st.Restore; rs != nil {
		r.Restore = &Restore{AskedAt: rs.AskedAt.UTC(), AskedBy: rs.AskedBy, Deadline: tm(rs.Deadline), RestoredAt: tm(rs.RestoredAt), Failed: rs.Failed}
	}
	if fromLabels, _ := TargetFrom(r.Labels); fromLabels == r.Target {
		r.Target = fromLabels // its strings the labels' own, as when ingested
	}
	return r
}

// labelMap is a label set as the public record holds it: none when empty.
func labelMap(ls labels.Labels) map[string]string {
	if ls.IsEmpty() {
		return nil
	}
	return ls.Map()
}

func deliveryToAPI(d Delivery) *v1alpha1.Delivery {
	if reflect.ValueOf(d).IsZero() {
		return nil // no message yet
	}
	return &v1alpha1.Delivery{Sent: d.Sent, At: at(d.At), FirstTry: at(d.FirstTry), Attempts: d.Attempts, Error: d.Error, Escalated: d.Escalated, Channels: d.Channels, Refs: d.Refs}
}

func deliveryFromAPI(d *v1alpha1.Delivery) Delivery {
	if d == nil {
		return Delivery{}
	}
	return Delivery{Sent: d.Sent, At: tm(d.At), FirstTry: tm(d.FirstTry), Attempts: d.Attempts, Error: d.Error, Escalated: d.Escalated, Channels: d.Channels, Refs: d.Refs}
}

func ref(apiVersion, kind, namespace, name string) v1alpha1.ObjectRef {
	return v1alpha1.ObjectRef{APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name}
}

// at is a time as the public record holds it: none when zero.
func at(t time.Time) *metav1.MicroTime {
	if t.IsZero() {
		return nil
	}
	m := metav1.NewMicroTime(t)
	return &m
}

func tm(m *metav1.MicroTime) time.Time {
	if m == nil {
		return time.Time{}
	}
	return m.UTC() // metav1 reads times as local ones
}
