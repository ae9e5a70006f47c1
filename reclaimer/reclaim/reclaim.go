// Package reclaim is the reclaimer's record of a reclaim and the ports it
// is carried out through: the Reclaim, its states, its target and audit
// events, its conversion to and from the public GPUReclaim; the Store and
// Journal that keep it, the Actor that stops a workload, the Notifiers
// that tell its owner. The stores, the actors and the notifiers import it;
// the lifecycle that moves a reclaim from state to state is package
// lifecycle.
package reclaim

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// State is where a reclaim is in its lifecycle.
type State string

const (
	// Pending: the owner is (being) warned; the action waits for the grace
	// period and the checks.
	Pending State = "pending"
	// Acting: the action has started; after a crash it is run again, which
	// every action allows (acting twice has the effect of acting once).
	Acting State = "acting"
	// Done: the action was carried out and the world showed the GPU
	// released (the pods, processes or job that held it gone).
	Done State = "done"
	// NotReleased: the action was carried out but the GPU was still held
	// at the kind's release deadline (the controller refused or ignored
	// the stop); Reason says what it said.
	NotReleased State = "not_released"
	// DryRun: the GPU would have been reclaimed.
	DryRun State = "dry_run"
	// Notified: the policy only tells the owner.
	Notified State = "notified"
	// Snoozed: a silence (a snooze) or an inhibition mutes the alert; when
	// it ends and the alert still fires, the cycle starts again.
	Snoozed State = "snoozed"
	// Cancelled: resolved, or found busy before the action.
	Cancelled State = "cancelled"
	// Exempt: kept, or in an exempt namespace or user.
	Exempt State = "exempt"
	// Failed: the action failed for good.
	Failed State = "failed"
	// Resolved: a resolved notification came before any firing one for the
	// same alert; a late firing notification is ignored.
	Resolved State = "resolved"
)

// Terminal says whether nothing more will be done, beyond telling the owner.
func (s State) Terminal() bool {
	return s != Pending && s != Acting && s != Snoozed
}

// EndedBefore says a reclaim may be pruned: it ended, its owner was told,
// and it closed before t.
func (r *Reclaim) EndedBefore(t time.Time) bool {
	return r.State.Terminal() && r.Final.Sent && !r.Closed.IsZero() && r.Closed.Before(t)
}

// Target is what an alert is about: a unit and who holds it.
type Target struct {
	Alertname  string
	UUID       string
	GPUUUID    string
	Node       string
	Kind       string
	MIGProfile string
	Namespace  string
	Pod        string
	Container  string
	User       string
	SlurmJob   string
	Keep       bool
	// Suggested is the alert's action label.
	Suggested config.Action
}

// TargetFrom reads a target from an alert's labels; false when the alert
// is not about a unit (exporter health alerts). Its strings are the
// labels' own: a target costs nothing beside them.
func TargetFrom(l labels.Labels) (Target, bool) {
	t := Target{
		Alertname: l.Get("alertname"), UUID: l.Get(names.LabelUUID), GPUUUID: l.Get(names.LabelGPUUUID), Node: l.Get(names.LabelNode), Kind: l.Get(names.LabelKind),
		MIGProfile: l.Get(names.LabelMIGProfile), Namespace: l.Get(names.LabelNamespace), Pod: l.Get(names.LabelPod), Container: l.Get(names.LabelContainer),
		User: l.Get(names.LabelUser), SlurmJob: l.Get(names.LabelSlurmJob), Keep: l.Get(names.LabelKeep) == "true", Suggested: config.Action(l.Get(names.LabelAction)),
	}
	return t, t.UUID != "" && t.Node != ""
}

// TargetKey identifies an alert's unit and holder apart from its other
// labels: two alerts with one key are about one thing to reclaim.
type TargetKey struct{ alertname, uuid, node, namespace, pod, user, slurmJob string }

func (t Target) Key() TargetKey {
	return TargetKey{t.Alertname, t.UUID, t.Node, t.Namespace, t.Pod, t.User, t.SlurmJob}
}

// Holder names who holds the unit, for people.
func (t Target) Holder() string {
	switch {
	case t.Pod != "":
		return t.Namespace + "/" + t.Pod
	case t.SlurmJob != "":
		return fmt.Sprintf("%s (Slurm job %s)", t.User, t.SlurmJob)
	case t.User != "":
		return t.User
	}
	return "the tenants of " + t.UUID
}

// UnitAndHolder names the unit and who holds it, for people: what an
// audit event is about.
func (t Target) UnitAndHolder() string { return t.Unit() + " held by " + t.Holder() }

// Unit names the unit, for people.
func (t Target) Unit() string {
	if t.Kind == names.KindMIG {
		return "MIG " + t.MIGProfile + " " + t.UUID + " on " + t.Node
	}
	return "GPU " + t.UUID + " on " + t.Node
}

var gpuSlices = regexp.MustCompile(`(?:^|\.)(\d)g\.`)

// Size is the unit's share of a GPU (a 1g slice is 1/7).
func (t Target) Size() float64 {
	if t.Kind == names.KindMIG {
		if m := gpuSlices.FindStringSubmatch(t.MIGProfile); m != nil {
			return float64(m[1][0]-'0') / 7
		}
	}
	return 1
}

// OnlyShare says whether the rules found the holder idle on a unit the
// others keep busy: stopping it frees its share, not the unit.
func (r *Reclaim) OnlyShare() bool { return r.Labels.Get(names.LabelSignal) == names.SignalHolder }

// Delivery is the state of one message to the owner.
type Delivery struct {
	Sent bool
	// Escalated says the admins were told it did not go out within the
	// warning deadline; FirstTry is the first attempt.
	Escalated bool
	At        time.Time
	Attempts  int
	Error     string
	FirstTry  time.Time
	// Refs lets a notifier update its message later (a Slack channel and ts).
	Refs map[string]string
	// Channels says where it went (a DM, a channel, the log).
	Channels []string
}

// Stopped is what an action stopped, to be restored: the top owner
// scaled or patched, or the JupyterHub server stopped.
type Stopped struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Stop is how it was stopped (StopScale, StopPatch, StopKueue, StopHub).
	Stop string
	// PreviousReplicas and ScaledTo, for a scale-down.
	PreviousReplicas int32
	ScaledTo         int32
	// Via is the object patched in its stead (a Kueue Workload).
	Via string
	// StopVerb and RestoreVerb are the verbs for messages.
	StopVerb    string
	RestoreVerb string
}

// String names the workload for people: "Job ml/train-7".
func (w *Stopped) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

// RestoredText says what a restore did: "Job ml/train-7 resumed".
func (w *Stopped) RestoredText() string {
	if w.Stop == StopScale || w.Stop == "" {
		return fmt.Sprintf("%s scaled back to %d replicas", w, w.PreviousReplicas)
	}
	return w.String() + " " + w.RestoreVerb
}

// Reclaim is one alert episode (fingerprint and startsAt) and what was
// decided and done about it: the engine's record. The stores keep and the
// API serves its public form (v1alpha1.GPUReclaim, record.go), never this.
type Reclaim struct {
	ID          string
	Fingerprint string
	StartsAt    time.Time
	Labels      labels.Labels
	Annotations labels.Labels
	Target      Target

	Policy string
	Action config.Action
	DryRun bool
	// Wanted: GPUs of the unit's kind were wanted when the owner was warned,
	// and the policy's shorter demand grace applied. AwaitsDemand: the
	// policy acts only while they are (config.Demand).
	Wanted       bool
	AwaitsDemand bool

	State  State
	Reason string

	Created time.Time
	Updated time.Time
	// ActAt is when the action is due (after the grace, and any deferral).
	ActAt time.Time
	// ActedAt is when the action was confirmed (the API accepted the
	// stop, the node answered that it ended the processes); for an action
	// begun before a restart and found to have taken effect, when it began.
	ActedAt time.Time
	// ReleaseBy is the deadline for the world to show the GPU released,
	// set when the action was carried out; ReleasedAt is when it did.
	ReleaseBy  time.Time
	ReleasedAt time.Time
	// SharedWith, once released, says who still holds the GPU: the action
	// freed the target's share of a shared ResourceClaim, not the GPU.
	SharedWith string
	// ActingSince is when the action began, until its outcome is recorded:
	// after a restart it says the action may have taken effect.
	ActingSince time.Time
	Closed      time.Time

	Warning Delivery
	// Final is the message that tells the owner what happened.
	Final Delivery

	Attempts  int
	LastError string
	NextTry   time.Time

	// TopOwner is the pod's top owner, found before the warning.
	TopOwner *TopOwner
	Stopped  *Stopped
	Killed   []int
	// Planned is what the action set out to end (a kill's PIDs), written
	// before it ran.
	Planned []int
	// HeldBy are the pods (namespace/name/uid) that held the GPU when the
	// action was decided: the release waits for each, whatever becomes of
	// their owners.
	HeldBy []string
	// Fence is the fencing token of the leader that last wrote it.
	Fence  int64
	Detail string
	// TargetGone: the target was already gone when the action ran.
	TargetGone bool
	// StopInPlace: the reclaim ended not released and its stop is still
	// written on the workload (release.on_not_released: keep, or taking
	// it back failed). The engine follows it; a restore takes it back.
	StopInPlace bool
	// Restore is a restore of what the action stopped, once asked; Snooze
	// a snooze, a keep or a silence that mutes the alert. Most reclaims
	// have neither, so each is kept only when there is one.
	Restore *Restore
	Snooze  *Snooze
	// ReleaseAskedBy is who pressed release now in a message: act at once.
	ReleaseAskedBy string
	// WarningRound counts the warnings due: one more each time a snooze
	// ends and the owner is warned again. A warning sent twice in one round
	// (a retry, a resend after a crash) is the same message to a receiver.
	WarningRound int
}

// Restore is a restore asked of the workload's controller.
type Restore struct {
	// AskedAt is when it was asked, and AskedBy by whom; Deadline is when
	// the workload must run again, RestoredAt when it was seen running,
	// Failed why it did not by the deadline.
	AskedAt    time.Time
	AskedBy    string
	Deadline   time.Time
	RestoredAt time.Time
	Failed     string
}

// Pending says the restore was asked and its outcome not seen yet.
func (rs *Restore) Pending() bool { return rs != nil && rs.RestoredAt.IsZero() && rs.Failed == "" }

// Snooze is why an alert is muted: a snooze or keep pressed (By, and the
// Silence it created) or a silence or inhibition found in Alertmanager,
// until Until (zero: an inhibition, looked at again later).
type Snooze struct {
	Silence string
	By      string
	Until   time.Time
}

// SnoozedBy is who snoozed or kept it; empty when nobody did.
func (r *Reclaim) SnoozedBy() string {
	if r.Snooze == nil {
		return ""
	}
	return r.Snooze.By
}

// Clone deep-copies the reclaim.
func (r *Reclaim) Clone() *Reclaim {
	c := *r
	c.Warning, c.Final = r.Warning.clone(), r.Final.clone()
	c.Killed = slices.Clone(r.Killed)
	c.Planned = slices.Clone(r.Planned)
	c.HeldBy = slices.Clone(r.HeldBy)
	if r.TopOwner != nil {
		topOwner := *r.TopOwner
		if topOwner.Above != nil {
			above := *topOwner.Above
			topOwner.Above = &above
		}
		topOwner.Claims = slices.Clone(topOwner.Claims)
		for i := range topOwner.Claims {
			topOwner.Claims[i].Others = slices.Clone(topOwner.Claims[i].Others)
		}
		c.TopOwner = &topOwner
	}
	if r.Stopped != nil {
		w := *r.Stopped
		c.Stopped = &w
	}
	if r.Restore != nil {
		rs := *r.Restore
		c.Restore = &rs
	}
	if r.Snooze != nil {
		s := *r.Snooze
		c.Snooze = &s
	}
	return &c
}

func (d Delivery) clone() Delivery {
	d.Refs = maps.Clone(d.Refs)
	d.Channels = slices.Clone(d.Channels)
	return d
}

// Restorable says whether a restore may still be asked: a stop or
// scale-down that is done, or still in place after not_released, that
// nobody has asked to restore yet.
func (r *Reclaim) Restorable() bool {
	stopped := r.State == Done || (r.State == NotReleased && r.StopInPlace)
	return stopped && r.Stopped != nil && r.Restore == nil && !r.DryRun
}

// ActionText says what the action will do or did, for people: the action,
// or for a pod's top owner "Job ml/train-7 suspended".
func (r *Reclaim) ActionText() string {
	c := r.TopOwner
	if c == nil || c.Kind == "" || (r.Action != config.ActionStop && r.Action != config.ActionScaleDown) {
		return string(r.Action)
	}
	if r.Action == config.ActionScaleDown {
		return c.String() + " scaled down"
	}
	return c.String() + " " + c.Stopped
}

// ID is the key of an alert episode: Alertmanager's fingerprint of the
// labels, and when the episode started. Every action is idempotent per ID.
func ID(fingerprint string, startsAt time.Time) string {
	if fingerprint == "" {
		return ""
	}
	return fingerprint + "-" + strconv.FormatInt(startsAt.Unix(), 10)
}

// Fingerprint stands in for Alertmanager's when a payload lacks one.
func Fingerprint(ls labels.Labels) string {
	h := sha256.New()
	ls.Range(func(l labels.Label) { fmt.Fprintf(h, "%s\xff%s\xff", l.Name, l.Value) })
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

// IdleSince estimates when the unit went idle: Prometheus starts an alert
// when its condition first holds, which for GPUIdle is after the rules'
// lookback of idleness (the alert's idle_for annotation).
func (r *Reclaim) IdleSince() time.Time {
	if d, err := time.ParseDuration(r.Annotations.Get("idle_for")); err == nil {
		return r.StartsAt.Add(-d)
	}
	return r.StartsAt
}

// ReleaseKind is what a reclaim's action frees, for its release deadline:
// the stopped workload's Kind, Pod for an eviction, process for a kill,
// SlurmJob for a cancel or requeue.
func (r *Reclaim) ReleaseKind() string {
	switch r.Action {
	case config.ActionKill:
		return config.ReleaseKindProcess
	case config.ActionCancel, config.ActionRequeue:
		return config.ReleaseKindSlurmJob
	}
	switch {
	case r.Stopped != nil && r.Stopped.Kind != "":
		return r.Stopped.Kind
	case r.TopOwner != nil && r.TopOwner.Kind != "":
		return r.TopOwner.Kind
	}
	return config.ReleaseKindPod
}
