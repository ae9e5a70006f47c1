package reclaim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

// AlertStatus is what Alertmanager says of an alert episode now.
type AlertStatus int

const (
	// AlertActive: still firing and neither silenced nor inhibited.
	AlertActive AlertStatus = iota
	// AlertSilenced: firing, but a silence (a snooze, a keep) mutes it.
	AlertSilenced
	// AlertGone: resolved, or a new episode has started.
	AlertGone
)

// AlertCheck is Alertmanager's answer.
type AlertCheck struct {
	Status AlertStatus
	// Reason says who silenced it and why, for people.
	Reason string
	// Until is when the silence ends; zero for an inhibition.
	Until time.Time
}

// AlertChecker asks Alertmanager about an alert before acting on it.
type AlertChecker interface {
	Check(ctx context.Context, r *Reclaim) (AlertCheck, error)
}

// Inspector looks up what the alert does not say.
type Inspector interface {
	// Kept says whether the target is marked to be kept (a pod's label or
	// annotation), and why.
	Kept(ctx context.Context, t Target) (bool, string, error)
	// Started is when the workload started: the pod's start, or the oldest
	// process's on bare metal.
	Started(ctx context.Context, t Target) (time.Time, error)
	// TopOwner finds the top owner of the target's pod; the zero
	// TopOwner for a bare pod or a process; ErrGone when the pod is gone.
	TopOwner(ctx context.Context, t Target) (TopOwner, error)
}

// How the reclaimer stops a pod's top owner.
const (
	// StopScale: replicas through the scale subresource.
	StopScale = config.StopScale
	// StopPatch: a JSON merge patch its controller honours (suspend, a stop annotation).
	StopPatch = config.StopPatch
	// StopKueue: the Kueue Workload that admits it is deactivated.
	StopKueue = "kueue"
	// StopHub: a JupyterHub single-user server, stopped through the hub.
	StopHub = "jupyterhub"
	// StopNone: the reclaimer cannot stop it; the owner is only told.
	StopNone = "none"
)

// TopOwner is the top of a pod's chain of controllers: what the
// reclaimer decides on and stops. The zero TopOwner is a bare pod (or a
// process on bare metal).
type TopOwner struct {
	APIVersion string `json:"api_version,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name,omitempty"`
	// Replicas it asks for, for a kind that scales.
	Replicas int32 `json:"replicas,omitempty"`
	// Stop is how it is stopped (StopScale, StopPatch, ...).
	Stop string `json:"stop,omitempty"`
	// Stopped is the verb of messages ("suspended", "stopped").
	Stopped string `json:"stopped,omitempty"`
	// Why says why it cannot be stopped (StopNone), or why it is stopped
	// below its top owner, for people.
	Why string `json:"why,omitempty"`
	// Above is the top owner when the stop is made one level lower, where
	// its controller always honours it (a RayJob whose RayCluster is
	// suspended).
	Above *TopOwner `json:"above,omitempty"`
	// Claims are the ResourceClaims the pod holds GPUs through (DRA).
	Claims []Claim `json:"claims,omitempty"`
}

// Claim is a ResourceClaim a pod holds GPUs through. A claim made from
// the pod's template goes with the pod; a shared one (standalone, named
// by the pod) outlives it and keeps its devices allocated while any
// consumer reserves it.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Shared    bool   `json:"shared,omitempty"`
	// Others are the other pods it was reserved for when it was read.
	Others []string `json:"others,omitempty"`
}

func (c Claim) String() string { return fmt.Sprintf("ResourceClaim %s/%s", c.Namespace, c.Name) }

// SharedText says, for the owner's warning, which of the pod's GPUs other
// pods hold too: stopping this workload frees its share, not the GPU.
// Empty when none does.
func (c *TopOwner) SharedText() string {
	if c == nil {
		return ""
	}
	var parts []string
	for _, cl := range c.Claims {
		if len(cl.Others) > 0 {
			parts = append(parts, fmt.Sprintf("%s with %s", cl, strings.Join(cl.Others, ", ")))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "It shares " + strings.Join(parts, "; ") + ": stopping it frees its share, and the GPU is freed when they stop too."
}

// Service says whether the controller keeps a number of replicas running:
// it is scaled, never evicted beneath.
func (c TopOwner) Service() bool { return c.Stop == StopScale }

// String names it for people: "Job ml/train-7".
func (c TopOwner) String() string {
	if c.Kind == "" {
		return "a bare pod"
	}
	if c.Namespace == "" {
		return c.Kind + " " + c.Name
	}
	return fmt.Sprintf("%s %s/%s", c.Kind, c.Namespace, c.Name)
}

// Actor carries out an action. Acting twice on the same reclaim must have
// the effect of acting once: a crash between acting and recording it
// repeats the action.
type Actor interface {
	Act(ctx context.Context, action config.Action, r *Reclaim) (Result, error)
}

// Release is what the world shows after a stop (or a restore).
type Release struct {
	// Done: the GPU is released (after a restore: the workload runs again).
	Done bool
	// Why says what still holds the GPU (or why the workload does not run)
	// and what its controller says: its status, conditions and latest
	// Warning events. For people.
	Why string
	// Shared, when Done, says who still holds the GPU after the target's
	// share was freed: the other consumers of a shared ResourceClaim.
	Shared string
}

// Verifier looks at the world after an action: a reclaim is done only
// when the GPU was seen released, and restored only when the workload
// was seen running again.
type Verifier interface {
	// Released says whether the holders of the target's unit are gone:
	// the pods (and no pod of the stopped workload holds a GPU on the
	// node), the processes, the Slurm job's allocation.
	Released(ctx context.Context, r *Reclaim) (Release, error)
	// Running says whether a restored workload runs again.
	Running(ctx context.Context, r *Reclaim) (Release, error)
}

// Planner says, before an action, what it will end (the PIDs of a kill,
// the pods that hold the GPU), so that a restart in the middle of it can
// still say what was done, and the release waits for each.
type Planner interface {
	Plan(ctx context.Context, action config.Action, r *Reclaim) (Plan, error)
}

// Plan is what an action sets out to end.
type Plan struct {
	// PIDs a kill ends.
	PIDs []int
	// Pods that hold the GPU (the target's, and the stopped workload's
	// GPU pods on its node), as namespace/name/uid.
	Pods []string
}

// Result is what an action did.
type Result struct {
	Stopped *Stopped
	Killed  []int
	Detail  string
}

// ErrGone says the target was already gone (evicted, exited, scaled):
// the unit is free, and nothing more is to be done.
var ErrGone = errors.New("already gone")

// RefusedError says the target is no longer what the alert said (the node
// found the unit busy, or other processes on it): the reclaim is cancelled.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// RetryError asks to try again later (a PodDisruptionBudget refused an
// eviction, a node was unreachable).
type RetryError struct {
	After time.Duration
	Err   error
}

func (e *RetryError) Error() string { return fmt.Sprintf("%v (retry in %s)", e.Err, e.After) }
func (e *RetryError) Unwrap() error { return e.Err }

// MessageKind says what a message tells.
type MessageKind string

const (
	MsgWarning   MessageKind = "warning"   // the unit is idle and will be reclaimed at ActAt
	MsgNotice    MessageKind = "notice"    // the policy only notifies (wasted, oversized, ...)
	MsgReclaimed MessageKind = "reclaimed" // done: the GPU was seen released
	// MsgNotReleased: the stop was carried out but the GPU is still held;
	// the owner and the admins hear what the controller said.
	MsgNotReleased MessageKind = "not_released"
	MsgCancelled   MessageKind = "cancelled" // resolved, silenced, busy again
	MsgFailed      MessageKind = "failed"    // the action failed for good
	MsgExempt      MessageKind = "exempt"    // kept: nothing will happen
	MsgRestored    MessageKind = "restored"  // a scale-down or stop was undone: the workload runs again
	// MsgRestoreFailed: a restore was asked, but the workload did not run
	// again by its deadline.
	MsgRestoreFailed MessageKind = "restore_failed"
	MsgAdmin         MessageKind = "admin"    // for admins: breaker, undeliverable warnings
	MsgSnoozed       MessageKind = "snoozed"  // someone snoozed the reclaim
	MsgKept          MessageKind = "kept"     // someone kept the unit
	MsgReleased      MessageKind = "released" // the owner released it: acting now
	// MsgReport is the weekly report: the whole of it for the admins
	// (Reclaim nil), a namespace's or a user's part for them (Reclaim
	// names only its Target).
	MsgReport MessageKind = "report"
)

// Message is what a notifier sends. For the owner's messages Reclaim is a
// copy of the reclaim as it is now.
type Message struct {
	Kind    MessageKind
	Reclaim *Reclaim
	Text    string
	// By is who pressed the button behind a snooze, keep, release or restore.
	By string
	// Restated: the warning already delivered, put right in place (the time
	// it acts at moved); nothing new is posted.
	Restated bool
	// Key is the message's idempotency key: the same for every attempt at
	// it, by any replica, across restarts.
	Key string
	// Again says an earlier attempt at this message began (its intent is
	// recorded) and may have been delivered without its record being
	// written: a notifier that can look for Key among what it delivered
	// does so before sending.
	Again bool
}

// MessageKey is the idempotency key of a reclaim's message of a kind: a
// warning is the same message across retries and restarts, even one
// resent after a crash with a later act-at time, and a new one after a
// snooze ends (a new round).
func MessageKey(r *Reclaim, kind MessageKind) string {
	if kind == MsgWarning {
		return fmt.Sprintf("%s/%s/%d", r.ID, kind, r.WarningRound)
	}
	return r.ID + "/" + string(kind)
}

// OwnerLookup finds the contact of a pod's owner (its or its namespace's
// gpureclaim.io/owner annotation): a Slack user id or an e-mail address.
// The notifiers that reach people use it.
type OwnerLookup interface {
	Owner(ctx context.Context, t Target) (string, error)
}

// Contact is how a target's owner is reached, as the notifiers that reach
// people configure it: a pod's owner annotation through owners, else a
// bare-metal user's entry in users, else <user>@domain; "" when none is
// known.
func Contact(ctx context.Context, owners OwnerLookup, t Target, users map[string]string, domain string) (string, error) {
	var contact string
	switch {
	case t.Pod != "" && owners != nil:
		c, err := owners.Owner(ctx, t)
		if err != nil {
			return "", fmt.Errorf("looking up the owner of %s: %w", t.Holder(), err)
		}
		contact = c
	case t.Pod == "" && t.User != "":
		contact = users[t.User]
		if contact == "" && domain != "" {
			contact = t.User + "@" + domain
		}
	}
	return strings.TrimSpace(contact), nil
}

// Notifier tells owners and admins.
type Notifier interface {
	Name() string
	// Send delivers a message. For the owner's messages it returns
	// references to update the message later (kept in the reclaim) and
	// where it went; prev holds the references of this notifier's earlier
	// messages about the same reclaim.
	Send(ctx context.Context, m Message, prev map[string]string) (refs map[string]string, channels []string, err error)
	// Blocking says whether a reclaim waits until this notifier has
	// delivered the owner's warning.
	Blocking() bool
}

// Leadership says whether this replica may still act and write: with two
// replicas, the one that may have lost the Lease (paused, cut off) must do
// nothing, not even what it was in the middle of.
type Leadership interface {
	// Check fails once the Lease may have passed to another replica.
	Check() error
	// Token is this term's fencing token, recorded with every write: the
	// store refuses a write with an older one.
	Token() int64
	// Fence is what an action on a node carries so that the node refuses
	// an older term's: the Lease, by its UID, and this term's token.
	Fence() (lease string, token int64)
}

// ErrNotLeader is a write, action or message refused because the replica
// may no longer lead.
var ErrNotLeader = errors.New("this replica may no longer hold the Lease")

// ConflictError is a write refused because another replica wrote the
// reclaim since this one read it: Stored is what the store holds now, and
// the engine goes on from it.
type ConflictError struct {
	Stored *Reclaim
	Cause  error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("reclaim %s was written by another replica (%v): re-read", e.Stored.ID, e.Cause)
}

func (e *ConflictError) Unwrap() error { return e.Cause }

// Restorer undoes a scale-down.
type Restorer interface {
	Restore(ctx context.Context, r *Reclaim) error
}

// ErrNotRestorable says a reclaim has nothing to restore.
var ErrNotRestorable = errors.New("nothing to restore: only a scale-down or stop that is done, or still in place after not_released, can be restored")

// Events writes Kubernetes Events about a reclaim on its pod or workload.
type Events interface {
	Event(ctx context.Context, r *Reclaim, reason, message string)
}

// MessageRefPrefix starts a notifier's ref to a message it posted and can
// update ("msg.<channel>": its id): a later message of the reclaim, or a
// warning restated, updates it in place.
const MessageRefPrefix = "msg."
