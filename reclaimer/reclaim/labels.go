package reclaim

// Label values of the reclaimer's metrics, typed so that each is written
// once; METRICS.md lists exactly these (TestMetricsDocMatchesTheReclaimer).

// Decision is what the engine decided about an alert or a pending reclaim:
// the decision label of gpureclaim_reclaimer_decisions_total.
type Decision string

const (
	DecisionPending       Decision = "pending"        // a warning is due
	DecisionExempt        Decision = "exempt"         // kept by annotation or config
	DecisionNotify        Decision = "notify"         // the policy, or the owner, only allows a notice
	DecisionDuplicate     Decision = "duplicate"      // an episode already known, or another alert about a unit already open
	DecisionStale         Decision = "stale"          // an episode older than one already ended
	DecisionCancelled     Decision = "cancelled"      // resolved before the action
	DecisionSnoozed       Decision = "snoozed"        // silenced, by Slack or by hand
	DecisionKept          Decision = "kept"           // someone pressed keep
	DecisionMinRuntime    Decision = "min_runtime"    // the workload has not run long enough
	DecisionOutsideWindow Decision = "outside_window" // outside the policy's action windows
	DecisionRateLimited   Decision = "rate_limited"   // over the namespace's or the fleet's rate
	DecisionNoPolicy      Decision = "no_policy"      // no policy matches the alert
	DecisionNotAUnit      Decision = "not_a_unit"     // not an alert about a unit
	DecisionResolvedFirst Decision = "resolved_first" // a resolved alert never seen firing
	DecisionNotReleased   Decision = "not_released"   // still firing after a stop the controller refused or ignored
	DecisionNoDemand      Decision = "no_demand"      // the policy waits until GPUs of the kind are wanted
	DecisionOtherCluster  Decision = "other_cluster"  // the alert names another cluster than the reclaimer's, or none
)

// Decisions lists every Decision.
var Decisions = []Decision{DecisionPending, DecisionExempt, DecisionNotify, DecisionDuplicate, DecisionStale, DecisionCancelled,
	DecisionSnoozed, DecisionKept, DecisionMinRuntime, DecisionOutsideWindow, DecisionRateLimited, DecisionNoPolicy, DecisionNotAUnit,
	DecisionResolvedFirst, DecisionNotReleased, DecisionNoDemand, DecisionOtherCluster}

// Component is the part of the reclaimer an error came from: the
// component label of gpureclaim_reclaimer_errors_total.
type Component string

const (
	ComponentStore        Component = "store"
	ComponentAlertmanager Component = "alertmanager"
	ComponentKubernetes   Component = "kubernetes"
	ComponentInspector    Component = "inspector" // when a workload started, what its pod runs
	ComponentNotifier     Component = "notifier"
	ComponentAction       Component = "action"
	ComponentPrometheus   Component = "prometheus" // restore_when queries
	ComponentRelease      Component = "release"    // looking whether a stop freed the GPU, or a restore ran it again
)

// Components lists every Component.
var Components = []Component{ComponentStore, ComponentAlertmanager, ComponentKubernetes, ComponentInspector, ComponentNotifier, ComponentAction, ComponentPrometheus, ComponentRelease}

// Fenced is what a replica refused itself, leadership in doubt: the what
// label of gpureclaim_reclaimer_fenced_total.
type Fenced string

const (
	FencedWrite   Fenced = "write"
	FencedAction  Fenced = "action"
	FencedMessage Fenced = "message"
	FencedEvent   Fenced = "event"
)

// FencedKinds lists every Fenced.
var FencedKinds = []Fenced{FencedWrite, FencedAction, FencedMessage, FencedEvent}

// ActionResult is how an action ended: the result label of
// gpureclaim_reclaimer_actions_total.
type ActionResult string

const (
	ActionDone    ActionResult = "done"
	ActionDryRun  ActionResult = "dry_run"
	ActionGone    ActionResult = "gone" // the target was gone when the action ran
	ActionRefused ActionResult = "refused"
	ActionRetry   ActionResult = "retry"
	ActionFailed  ActionResult = "failed"
	// ActionNotReleased: carried out, but the GPU was still held at the
	// release deadline.
	ActionNotReleased ActionResult = "not_released"
)

// ActionResults lists every ActionResult.
var ActionResults = []ActionResult{ActionDone, ActionDryRun, ActionGone, ActionRefused, ActionRetry, ActionFailed, ActionNotReleased}

// MessageResult is whether a notifier delivered a message: the result label
// of gpureclaim_reclaimer_messages_total.
type MessageResult string

const (
	MessageSent  MessageResult = "sent"
	MessageError MessageResult = "error"
)

// MessageResults lists every MessageResult.
var MessageResults = []MessageResult{MessageSent, MessageError}

// MessageKinds lists every MessageKind.
var MessageKinds = []MessageKind{MsgWarning, MsgNotice, MsgReclaimed, MsgNotReleased, MsgCancelled, MsgFailed, MsgExempt, MsgRestored,
	MsgRestoreFailed, MsgAdmin, MsgSnoozed, MsgKept, MsgReleased, MsgReport}

// States lists the states the reclaims gauge reports.
var States = []State{Pending, Acting, Snoozed, Done, NotReleased, DryRun, Notified, Cancelled, Exempt, Failed}

// AlertStatuses are the statuses of received alerts: the status label of
// gpureclaim_reclaimer_alerts_received_total.
var AlertStatuses = []string{"firing", "resolved"}
