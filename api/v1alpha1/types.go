// Package v1alpha1 is gpureclaim's public record of a reclaim, the
// GPUReclaim: what the reclaimer stores (a resource in its namespace on
// Kubernetes, a value in its bbolt file) and what its API serves
// (/api/v1/reclaims). Types only: the reclaimer's engine converts its own
// record to and from them at the store's boundary; their deepcopy
// functions and the CRD are generated from them (make crds), and they
// register in a scheme for typed clients (AddToScheme).
//
// +kubebuilder:object:generate=true
// +groupName=gpureclaim.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The GPUReclaim resource.
const (
	Group    = "gpureclaim.io"
	Version  = "v1alpha1"
	Kind     = "GPUReclaim"
	Resource = "gpureclaims"
)

// GPUReclaim is one reclaim of an idle GPU or MIG instance: the alert
// episode it is about, and what the reclaimer decided, said and did. The
// reclaimer alone writes it: the spec once, when it creates it, the status
// through its status subresource. People read it; `kubectl get gpureclaims
// --field-selector status.state=pending` lists those in one state.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=gpureclaim
// +kubebuilder:subresource:status
// +kubebuilder:selectablefield:JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder`
// +kubebuilder:printcolumn:name="Unit",type=string,JSONPath=`.status.unit`,priority=1
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policy`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.status.action`
// +kubebuilder:printcolumn:name="Top Owner",type=string,JSONPath=`.status.topOwner.name`,priority=1
// +kubebuilder:printcolumn:name="Act At",type=date,JSONPath=`.status.actAt`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GPUReclaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GPUReclaimSpec   `json:"spec"`
	Status GPUReclaimStatus `json:"status,omitempty"`
}

// GPUReclaimList is a list of GPUReclaims.
//
// +kubebuilder:object:root=true
type GPUReclaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUReclaim `json:"items"`
}

// GPUReclaimSpec is what the reclaim is about. It does not change.
type GPUReclaimSpec struct {
	// Target is the unit and who holds it, from the alert's labels.
	Target Target `json:"target"`
	// Policy is the name of the policy that decides it.
	// +optional
	Policy string `json:"policy,omitempty"`
	// Episode is the alert episode: its fingerprint, start and labels.
	Episode Episode `json:"episode"`
}

// Target is the unit an alert is about and who holds it.
type Target struct {
	// Alertname is the alert's name (GPUIdle, GPUWasted, ...).
	Alertname string `json:"alertname"`
	// UUID is the unit's: a GPU's, or a MIG instance's.
	UUID string `json:"uuid"`
	// GPUUUID is the GPU's, for a MIG instance.
	// +optional
	GPUUUID string `json:"gpuUUID,omitempty"`
	// Node is where the unit is.
	Node string `json:"node"`
	// Kind is gpu or mig.
	// +optional
	Kind string `json:"kind,omitempty"`
	// MIGProfile is a MIG instance's profile (1g.10gb).
	// +optional
	MIGProfile string `json:"migProfile,omitempty"`
	// Namespace, Pod and Container hold it on Kubernetes.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	Container string `json:"container,omitempty"`
	// User holds it on bare metal; SlurmJob, through Slurm.
	// +optional
	User string `json:"user,omitempty"`
	// +optional
	SlurmJob string `json:"slurmJob,omitempty"`
	// Keep: the alert says the unit is kept.
	// +optional
	Keep bool `json:"keep,omitempty"`
	// SuggestedAction is the alert's action label, which the auto action takes.
	// +optional
	SuggestedAction string `json:"suggestedAction,omitempty"`
}

// Episode is one firing of an alert.
type Episode struct {
	// Fingerprint is Alertmanager's, of the alert's labels.
	Fingerprint string `json:"fingerprint"`
	// StartsAt is when the episode began.
	StartsAt metav1.MicroTime `json:"startsAt"`
	// Labels and Annotations are the alert's.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// State is where a reclaim is in its life.
//
// +kubebuilder:validation:Enum=pending;acting;done;not_released;dry_run;notified;snoozed;cancelled;exempt;failed;resolved
type State string

// The conditions of a GPUReclaim, for `kubectl wait
// --for=condition=Released`: derived from the state when it is written,
// never read back.
const (
	// ConditionWarned: the owner's warning was delivered; the grace runs
	// from its lastTransitionTime.
	ConditionWarned = "Warned"
	// ConditionActing: the action is under way.
	ConditionActing = "Acting"
	// ConditionReleased: True once the world showed the GPU released;
	// False once the reclaim ended otherwise (its reason is the state);
	// Unknown until then.
	ConditionReleased = "Released"
	// ConditionRestored, once a restore was asked: True once a pod of the
	// workload that holds a GPU runs again, False if it did not by the
	// deadline.
	ConditionRestored = "Restored"
)

// GPUReclaimStatus is where the reclaim stands and what was done: every
// field the reclaimer resumes from.
type GPUReclaimStatus struct {
	// State is where the reclaim is in its life.
	// +optional
	State State `json:"state,omitempty"`
	// Conditions say the state the Kubernetes way: Warned, Acting,
	// Released, Restored.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Reason says why, for people.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Holder names who holds the unit (a pod, a Unix user, a Slurm job)
	// and Unit the unit, for people.
	// +optional
	Holder string `json:"holder,omitempty"`
	// +optional
	Unit string `json:"unit,omitempty"`
	// Action is what the policy decided: notify, kill, evict, scale_down,
	// stop, cancel or requeue.
	// +optional
	Action string `json:"action,omitempty"`
	// DryRun: decided in dry run; nothing is done.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// Created is when the reclaim was decided; Updated its last change.
	// +optional
	Created *metav1.MicroTime `json:"created,omitempty"`
	// +optional
	Updated *metav1.MicroTime `json:"updated,omitempty"`
	// ActAt is when the action is due: the grace from the delivered
	// warning, and any deferral.
	// +optional
	ActAt *metav1.MicroTime `json:"actAt,omitempty"`
	// ActingSince is when an action began whose outcome is not recorded
	// yet: after a restart it may have taken effect.
	// +optional
	ActingSince *metav1.MicroTime `json:"actingSince,omitempty"`
	// ActedAt is when the action was carried out.
	// +optional
	ActedAt *metav1.MicroTime `json:"actedAt,omitempty"`
	// ReleaseBy is the deadline for the world to show the unit released;
	// ReleasedAt is when it did.
	// +optional
	ReleaseBy *metav1.MicroTime `json:"releaseBy,omitempty"`
	// +optional
	ReleasedAt *metav1.MicroTime `json:"releasedAt,omitempty"`
	// SharedWith, once released, says who still holds the GPU: the action
	// freed the holder's share.
	// +optional
	SharedWith string `json:"sharedWith,omitempty"`
	// Closed is when the reclaim reached its final state.
	// +optional
	Closed *metav1.MicroTime `json:"closed,omitempty"`
	// NextTry is when the reclaimer looks at it again.
	// +optional
	NextTry *metav1.MicroTime `json:"nextTry,omitempty"`

	// Wanted: GPUs of the unit's kind were wanted when the owner was
	// warned, and the policy's shorter grace applied. AwaitsDemand: the
	// policy acts only while they are.
	// +optional
	Wanted bool `json:"wanted,omitempty"`
	// +optional
	AwaitsDemand bool `json:"awaitsDemand,omitempty"`

	// Warning is the owner's warning; the grace runs from its delivery.
	// +optional
	Warning *Delivery `json:"warning,omitempty"`
	// WarningRound counts the warnings due: one more each time a snooze
	// ends and the owner is warned again.
	// +optional
	WarningRound int `json:"warningRound,omitempty"`
	// Final is the message that tells the owner what happened.
	// +optional
	Final *Delivery `json:"final,omitempty"`

	// Attempts counts the action's attempts; LastError is the last one's.
	// +optional
	Attempts int `json:"attempts,omitempty"`
	// +optional
	LastError string `json:"lastError,omitempty"`
	// TopOwner is the pod's top owner the reclaimer decided on, and how
	// it stops it.
	// +optional
	TopOwner *TopOwner `json:"topOwner,omitempty"`
	// Workload is what the action stopped, to be restored.
	// +optional
	Workload *Workload `json:"workload,omitempty"`
	// Planned are the PIDs a kill set out to end, written before it ran;
	// Killed those it ended.
	// +optional
	Planned []int `json:"planned,omitempty"`
	// HeldBy are the pods (namespace/name/uid) that held the GPU when the
	// action was decided: it is released only once each is gone.
	// +optional
	HeldBy []string `json:"heldBy,omitempty"`
	// +optional
	Killed []int `json:"killed,omitempty"`
	// Detail is what the action reported.
	// +optional
	Detail string `json:"detail,omitempty"`
	// TargetGone says the target was already gone when the action ran: the
	// reclaimer stopped nothing, and the result counted is "gone".
	// +optional
	TargetGone bool `json:"targetGone,omitempty"`
	// StopInPlace says the reclaim ended not released with its stop still
	// written on the workload: the controller may carry it out later (the
	// reclaim then becomes done), and a restore takes it back.
	// +optional
	StopInPlace bool `json:"stopInPlace,omitempty"`
	// Fence is the fencing token (the Lease's term) of the leader that
	// last wrote the status; the chart's admission policy refuses a status
	// written with an older one.
	// +optional
	Fence int64 `json:"fence,omitempty"`

	// ReleaseAskedBy is who asked, from the warning, for the unit to be
	// released at once.
	// +optional
	ReleaseAskedBy string `json:"releaseAskedBy,omitempty"`
	// Snooze is a snooze or a keep: the Alertmanager silence that mutes
	// the alert.
	// +optional
	Snooze *Snooze `json:"snooze,omitempty"`
	// Restore is a restore of the stopped workload.
	// +optional
	Restore *Restore `json:"restore,omitempty"`

	// Events are the reclaim's audit trail, oldest first (the last 100 on
	// Kubernetes).
	// +optional
	Events []Event `json:"events,omitempty"`
}

// Delivery is one message to the owner.
type Delivery struct {
	// Sent: delivered, or given up on.
	Sent bool `json:"sent"`
	// At is when it was delivered; FirstTry its first attempt.
	// +optional
	At *metav1.MicroTime `json:"at,omitempty"`
	// +optional
	FirstTry *metav1.MicroTime `json:"firstTry,omitempty"`
	// Attempts and Error are its attempts and the last one's error.
	// +optional
	Attempts int `json:"attempts,omitempty"`
	// +optional
	Error string `json:"error,omitempty"`
	// Escalated: the admins were told it was not delivered in time.
	// +optional
	Escalated bool `json:"escalated,omitempty"`
	// Channels says where it went (a DM, a channel, the log).
	// +optional
	Channels []string `json:"channels,omitempty"`
	// Refs are the notifiers' own: where each one's message is, to update
	// it, and which delivered it.
	// +optional
	Refs map[string]string `json:"refs,omitempty"`
}

// TopOwner is the top of a pod's chain of controllers, and how the
// reclaimer stops it.
type TopOwner struct {
	ObjectRef `json:",inline"`
	// Replicas it asks for, for a kind that scales.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// Stop is how it is stopped: scale, patch, kueue, jupyterhub, or none.
	// +optional
	Stop string `json:"stop,omitempty"`
	// Stopped is the verb of messages (suspended, stopped).
	// +optional
	Stopped string `json:"stopped,omitempty"`
	// Why says why it cannot be stopped, or why it is stopped below its
	// top owner.
	// +optional
	Why string `json:"why,omitempty"`
	// Above is the top owner when the stop is made one level lower (a
	// RayJob whose RayCluster is suspended).
	// +optional
	Above *ObjectRef `json:"above,omitempty"`
	// Claims are the ResourceClaims the pod holds GPUs through.
	// +optional
	Claims []Claim `json:"claims,omitempty"`
}

// ObjectRef names a Kubernetes object.
type ObjectRef struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
}

// Claim is a ResourceClaim a pod holds GPUs through.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Shared: a standalone claim other pods may reserve too.
	// +optional
	Shared bool `json:"shared,omitempty"`
	// Others are the other pods it was reserved for when it was read.
	// +optional
	Others []string `json:"others,omitempty"`
}

// Workload is what an action stopped, to be restored.
type Workload struct {
	ObjectRef `json:",inline"`
	// Stop is how it was stopped: scale, patch, kueue or jupyterhub.
	// +optional
	Stop string `json:"stop,omitempty"`
	// PreviousReplicas and ScaledTo, for a scale-down.
	// +optional
	PreviousReplicas int32 `json:"previousReplicas,omitempty"`
	// +optional
	ScaledTo int32 `json:"scaledTo,omitempty"`
	// Via is the object patched in its stead (a Kueue Workload).
	// +optional
	Via string `json:"via,omitempty"`
	// Stopped and Restored are the verbs of messages.
	// +optional
	Stopped string `json:"stopped,omitempty"`
	// +optional
	Restored string `json:"restored,omitempty"`
}

// Snooze is a silence that mutes the alert.
type Snooze struct {
	// Silence is the Alertmanager silence's ID.
	// +optional
	Silence string `json:"silence,omitempty"`
	// By is who snoozed or kept it, and Until when.
	// +optional
	By string `json:"by,omitempty"`
	// +optional
	Until *metav1.MicroTime `json:"until,omitempty"`
}

// Restore is a restore of a stopped workload.
type Restore struct {
	// AskedAt is when it was asked of the controller, and AskedBy by whom.
	AskedAt metav1.MicroTime `json:"askedAt"`
	// +optional
	AskedBy string `json:"askedBy,omitempty"`
	// Deadline is when the workload must run again.
	// +optional
	Deadline *metav1.MicroTime `json:"deadline,omitempty"`
	// RestoredAt is when it was seen running again; Failed why it was not
	// by the deadline.
	// +optional
	RestoredAt *metav1.MicroTime `json:"restoredAt,omitempty"`
	// +optional
	Failed string `json:"failed,omitempty"`
}

// Event is one line of a reclaim's audit trail.
type Event struct {
	Time metav1.MicroTime `json:"time"`
	// Kind is what happened: decided, warned, acting, done, ...
	Kind string `json:"kind"`
	// +optional
	Detail string `json:"detail,omitempty"`
	// Actor is who did it: alertmanager, policy, reclaimer, or a person.
	// +optional
	Actor string `json:"actor,omitempty"`
}
