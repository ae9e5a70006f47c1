package lifecycle

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// What the reclaimer does with a reclaim is decided in one place: decide,
// a pure function of the reclaim, its policy, the config and the facts
// looked up so far. When it needs a fact it has not been given it says so
// (DoGather), the engine looks it up (gather, facts.go) and asks again:
// lookups stay lazy and in order (Alertmanager is asked last, and only
// when everything else lets the action go), and every branch is a row of
// one table test.

// Do is what a verdict tells the engine to do.
type Do int

const (
	// DoGather: look up Need, then decide again.
	DoGather Do = iota
	// DoWarn: warn the owner that Action runs after Grace (a new reclaim:
	// it is pending, and warned next).
	DoWarn
	// DoNotify: tell the owner only, and why.
	DoNotify
	// DoExempt: nothing is done and nobody is told.
	DoExempt
	// DoWait: look again at Until, saying why.
	DoWait
	// DoCancel: end the reclaim, saying why.
	DoCancel
	// DoSnooze: the alert is silenced (Silence).
	DoSnooze
	// DoAct: carry the action out now.
	DoAct
	// DoDone: the world shows the GPU released (or, with Shared, the
	// target's share of it).
	DoDone
	// DoNotReleased: past its deadline the GPU is still held.
	DoNotReleased
	// DoKeep: a person keeps the target until its workload ends (By,
	// SilenceID, Until).
	DoKeep
	// DoReleaseNow: a person asks for the action now (By).
	DoReleaseNow
)

// Need names a fact decide reads.
type Need int

// The facts decide may ask for.
const (
	NeedKept Need = iota + 1
	NeedTopOwner
	NeedWanted
	NeedBreaker
	NeedStarted
	NeedActed
	NeedAlert
	NeedRelease
)

func (n Need) String() string {
	return [...]string{"", "keep mark", "top owner", "demand", "circuit breaker", "start time", "actions taken", "alert", "release"}[n]
}

// Fact is one looked-up fact, or why it could not be.
type Fact[T any] struct {
	Value T
	Err   error
}

// Keep is a target's keep mark.
type Keep struct {
	Kept bool
	Why  string
}

// Acted is when actions were taken, by the fleet and in the target's
// namespace, for the rate limits.
type Acted struct {
	Fleet, Namespace []time.Time
}

// Facts are what the engine has looked up about a reclaim's target; a nil
// field has not been.
type Facts struct {
	Now      time.Time
	Kept     *Fact[Keep]
	TopOwner *Fact[reclaim.TopOwner]
	// Wanted: GPUs of the unit's kind are wanted by pending work.
	Wanted *Fact[bool]
	// Breaker: the circuit breaker is open.
	Breaker *Fact[bool]
	// Started is when the workload started; zero when nothing can tell.
	Started *Fact[time.Time]
	Acted   *Fact[Acted]
	// Alert is Alertmanager's re-check; firing when nothing is asked.
	Alert *Fact[reclaim.AlertCheck]
	// Release is what the world shows after the action.
	Release *Fact[reclaim.Release]
}

// Verdict is what decide concludes, or what a person asks (DoSnooze with
// By, DoKeep, DoReleaseNow); transition applies it to the record.
type Verdict struct {
	Do   Do
	Need Need // DoGather
	// Action is the action warned of (DoWarn).
	Action config.Action
	// TopOwner, when looked up, is recorded with the verdict.
	TopOwner *reclaim.TopOwner
	// Grace runs from the warning's delivery to the action (DoWarn);
	// Wanted says the policy's shorter demand grace applies.
	Grace  time.Duration
	Wanted bool
	// Until is when to look again (DoWait), or when a person's snooze or
	// keep ends.
	Until time.Time
	// Why says why, for the record and the owner.
	Why string
	// Silence is the silence or inhibition found (DoSnooze).
	Silence reclaim.AlertCheck
	// Shared, when done, says who still holds the GPU: the action freed
	// the target's share.
	Shared string
	// StopInPlace, when not released, says the stop stays written.
	StopInPlace bool
	// By is who gave a person's verdict, or who else than the reclaimer
	// the record names for it (Alertmanager, resolving the alert).
	By string
	// SilenceID is the Alertmanager silence a person's snooze or keep made.
	SilenceID string
	// Decision, when set, is counted once the verdict is recorded.
	Decision reclaim.Decision
}

// decide is the reclaimer's one decision: what to do with r now, given
// its policy p (nil when none matches, or it left the config) and the
// facts f. It is pure. What it decides depends on where r stands:
//   - new (no state yet): exempt, notify only, or pending a warning;
//   - pending, not warned: exempt by a keep mark, notify only when its top
//     owner cannot be stopped, or warn of the action on the top owner;
//   - pending, warned and due, or acting again after a failed attempt:
//     wait (breaker, windows, minimum runtime, rate limits, demand, an
//     unreachable dependency), cancel, snooze, or act;
//   - snoozed, the silence over: snooze again, cancel, or warn again;
//   - carried out: done once the world shows the GPU released, not
//     released past the kind's deadline, else look again.
func decide(r *reclaim.Reclaim, p *config.Policy, c *config.Config, f Facts) Verdict {
	switch {
	case r.State == "":
		return decideNew(r, p, c)
	case r.State == reclaim.Pending && !r.Warning.Sent:
		return decideWarning(r, p, f)
	case r.State == reclaim.Acting && !r.ReleaseBy.IsZero():
		return decideRelease(r, c, f)
	case r.State == reclaim.Pending || r.State == reclaim.Acting:
		return decideAction(r, p, c, f) // an action tried again checks everything again
	case r.State == reclaim.Snoozed:
		return decideSnoozed(p, f)
	}
	return Verdict{Do: DoWait, Until: f.Now, Why: fmt.Sprintf("nothing to decide in state %s", r.State)}
}

// decideNew is the decision on an episode as it arrives: config alone.
func decideNew(r *reclaim.Reclaim, p *config.Policy, c *config.Config) Verdict {
	if p == nil {
		return Verdict{Do: DoExempt, Why: "no policy matches the alert", Decision: reclaim.DecisionNoPolicy}
	}
	if exempt, why := exemptByConfig(c, r.Target); exempt {
		return Verdict{Do: DoExempt, Why: why, Decision: reclaim.DecisionExempt}
	}
	if r.Action == config.ActionNotify {
		return Verdict{Do: DoNotify, Action: r.Action, Why: "the policy only notifies", Decision: reclaim.DecisionNotify}
	}
	return Verdict{Do: DoWarn, Action: r.Action, Grace: p.GraceTime(), Why: "warning the owner; reclaim after the grace period", Decision: reclaim.DecisionPending}
}

// decideWarning is the decision before the warning: it is looked at again
// on every attempt to deliver it, so a keep mark set meanwhile counts.
func decideWarning(r *reclaim.Reclaim, p *config.Policy, f Facts) Verdict {
	if f.Kept == nil {
		return Verdict{Do: DoGather, Need: NeedKept}
	}
	if f.Kept.Err == nil && f.Kept.Value.Kept {
		return Verdict{Do: DoExempt, Why: f.Kept.Value.Why, Decision: reclaim.DecisionExempt}
	}
	if p == nil {
		return Verdict{Do: DoWarn, Action: r.Action} // its policy left the config: the due check cancels it
	}
	v := Verdict{Do: DoWarn, Action: r.Action, Grace: p.GraceTime()}
	if r.Target.Pod != "" && r.TopOwner == nil && stopsAWorkload(r.Action) {
		if f.TopOwner == nil {
			return Verdict{Do: DoGather, Need: NeedTopOwner}
		}
		switch err := f.TopOwner.Err; {
		case errors.Is(err, reclaim.ErrGone) || errors.Is(err, errNothingToAsk):
			// The pod is gone: the action finds it so.
		case err != nil:
			return Verdict{Do: DoWait, Until: f.Now.Add(dependencyWait), Why: "cannot look up what owns the pod yet: " + err.Error()}
		default:
			top := f.TopOwner.Value
			action, why := decideOnOwner(p, r.Action, top, r.Target)
			if action == config.ActionNotify {
				return Verdict{Do: DoNotify, Action: action, TopOwner: &top, Why: why, Decision: reclaim.DecisionNotify}
			}
			v.Action, v.TopOwner = action, &top
		}
	}
	if d := p.Demand; d != nil && d.Grace != nil && d.GraceTime() < p.GraceTime() {
		if f.Wanted == nil {
			return Verdict{Do: DoGather, Need: NeedWanted}
		}
		if f.Wanted.Err == nil && f.Wanted.Value {
			v.Grace, v.Wanted = d.GraceTime(), true // others wait for a GPU of this kind
		}
	}
	return v
}

// decideOnOwner turns the policy's action for a pod into what its top
// owner needs, or notify with the reason.
func decideOnOwner(p *config.Policy, action config.Action, topOwner reclaim.TopOwner, t reclaim.Target) (config.Action, string) {
	auto := p.Action == config.ActionAuto
	switch {
	case topOwner.Stop == reclaim.StopNone:
		return config.ActionNotify, topOwner.Why
	case topOwner.Kind == "":
		if action == config.ActionScaleDown {
			return config.ActionNotify, fmt.Sprintf("pod %s/%s has no controller to scale down; the policy asks for scale_down, so the owner is told", t.Namespace, t.Pod)
		}
		return config.ActionEvict, ""
	case action == config.ActionEvict && !auto:
		return config.ActionNotify, fmt.Sprintf("%s runs the pod and would start another if it were evicted; the policy asks for evict, so the owner is told (use action stop or auto)", topOwner)
	case topOwner.Stop == reclaim.StopScale:
		if auto && topOwner.Replicas > 1 {
			return config.ActionNotify, fmt.Sprintf("one of %d replicas of %s: an eviction would be replaced and a scale-down would stop busy replicas too; telling the owner only", topOwner.Replicas, topOwner)
		}
		return config.ActionScaleDown, ""
	case action == config.ActionScaleDown && !auto:
		return config.ActionNotify, fmt.Sprintf("%s does not scale; the policy asks for scale_down, so the owner is told (use action stop or auto)", topOwner)
	}
	return config.ActionStop, ""
}

// stopsAWorkload says whether an action stops a pod, and so depends on
// what owns it.
func stopsAWorkload(action config.Action) bool {
	switch action {
	case config.ActionEvict, config.ActionScaleDown, config.ActionStop:
		return true
	}
	return false
}

// decideAction is the decision on a warned reclaim whose action is due:
// every check that must hold before acting, in order, the cheap ones
// first, and those a person can change (the alert, a keep) last.
func decideAction(r *reclaim.Reclaim, p *config.Policy, c *config.Config, f Facts) Verdict {
	now := f.Now
	if f.Breaker == nil {
		return Verdict{Do: DoGather, Need: NeedBreaker}
	}
	if f.Breaker.Value {
		return Verdict{Do: DoWait, Until: now.Add(heldWait), Why: "held: the circuit breaker is open"}
	}
	if p == nil {
		return Verdict{Do: DoCancel, Why: "its policy is gone from the config"}
	}
	if r.ReleaseAskedBy == "" {
		if next := nextInWindows(p.Windows, now); next.After(now) {
			return Verdict{Do: DoWait, Until: next, Why: "outside the policy's windows; next at " + next.UTC().Format(time.RFC3339), Decision: reclaim.DecisionOutsideWindow}
		}
		if min := p.MinRuntimeTime(); min > 0 {
			if f.Started == nil {
				return Verdict{Do: DoGather, Need: NeedStarted}
			}
			switch started, err := f.Started.Value, f.Started.Err; {
			case errors.Is(err, reclaim.ErrGone):
				return Verdict{Do: DoCancel, Why: "the workload is gone"}
			case err != nil:
				return Verdict{Do: DoWait, Until: now.Add(heldWait), Why: "cannot tell when the workload started: " + err.Error()}
			case now.Before(started.Add(min)):
				return Verdict{Do: DoWait, Until: started.Add(min), Decision: reclaim.DecisionMinRuntime,
					Why: fmt.Sprintf("the workload started %s ago; the policy spares it until it has run %s", now.Sub(started).Round(time.Second), min)}
			}
		}
		if f.Acted == nil {
			return Verdict{Do: DoGather, Need: NeedActed}
		}
		if hit, free := limited(c.RateLimits.Global, f.Acted.Value.Fleet, now); hit {
			return Verdict{Do: DoWait, Until: free, Why: "held by the global rate limit", Decision: reclaim.DecisionRateLimited}
		}
		if r.Target.Namespace != "" {
			if hit, free := limited(c.RateLimits.PerNamespace, f.Acted.Value.Namespace, now); hit {
				return Verdict{Do: DoWait, Until: free, Why: "held by the rate limit of namespace " + r.Target.Namespace, Decision: reclaim.DecisionRateLimited}
			}
		}
		if d := p.Demand; d != nil && d.Required {
			if f.Wanted == nil {
				return Verdict{Do: DoGather, Need: NeedWanted}
			}
			switch {
			case f.Wanted.Err != nil:
				return Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot tell whether GPUs of its kind are wanted: " + f.Wanted.Err.Error()}
			case !f.Wanted.Value:
				return Verdict{Do: DoWait, Until: now.Add(time.Duration(c.Prometheus.Interval)), Decision: reclaim.DecisionNoDemand,
					Why: "waiting until a GPU of its kind is wanted: no pending work asks for one"}
			}
		}
	}
	// Last, the alert itself. The owner who asked for the release is not
	// held by windows, limits or their own snooze; the episode they
	// pressed on must still fire.
	if f.Alert == nil {
		return Verdict{Do: DoGather, Need: NeedAlert}
	}
	switch chk, err := f.Alert.Value, f.Alert.Err; {
	case err != nil:
		return Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot re-check the alert in Alertmanager: " + err.Error()}
	case chk.Status == reclaim.AlertGone:
		return Verdict{Do: DoCancel, Why: "the alert no longer fires: the GPU is busy again or was released"}
	case chk.Status == reclaim.AlertSilenced && r.ReleaseAskedBy == "":
		return Verdict{Do: DoSnooze, Silence: chk, Why: "the alert is silenced: " + chk.Reason, Decision: reclaim.DecisionSnoozed}
	}
	// Then the keep, as late as the alert: a person may have marked the
	// pod, an owner of it, its namespace or the job during the grace, and
	// a keep outranks a release-now pressed before it.
	if exempt, why := exemptByConfig(c, r.Target); exempt {
		return Verdict{Do: DoCancel, Why: why, Decision: reclaim.DecisionExempt}
	}
	if f.Kept == nil {
		return Verdict{Do: DoGather, Need: NeedKept}
	}
	switch k, err := f.Kept.Value, f.Kept.Err; {
	case err != nil:
		return Verdict{Do: DoWait, Until: now.Add(dependencyWait), Why: "cannot check whether a person keeps it: " + err.Error()}
	case k.Kept:
		return Verdict{Do: DoCancel, Why: "kept: " + k.Why, Decision: reclaim.DecisionExempt}
	}
	return Verdict{Do: DoAct, Action: r.Action}
}

// decideSnoozed is the decision once a snooze's silence has ended: if
// the alert still fires, the owner is warned again with a new grace.
func decideSnoozed(p *config.Policy, f Facts) Verdict {
	if f.Alert == nil {
		return Verdict{Do: DoGather, Need: NeedAlert}
	}
	switch chk, err := f.Alert.Value, f.Alert.Err; {
	case err != nil:
		return Verdict{Do: DoWait, Until: f.Now.Add(dependencyWait), Why: "cannot re-check the alert in Alertmanager: " + err.Error()}
	case chk.Status == reclaim.AlertSilenced:
		return Verdict{Do: DoSnooze, Silence: chk, Why: "the alert is silenced: " + chk.Reason, Decision: reclaim.DecisionSnoozed}
	case chk.Status == reclaim.AlertGone:
		return Verdict{Do: DoCancel, Why: "the alert resolved while it was snoozed"}
	case p == nil:
		return Verdict{Do: DoCancel, Why: "its policy is gone from the config"}
	}
	return Verdict{Do: DoWarn, Grace: p.GraceTime(), Why: "the snooze ended and the unit is still idle: warning the owner again"}
}

// decideRelease is the decision after an action was carried out: done
// only when the world shows the GPU free.
func decideRelease(r *reclaim.Reclaim, c *config.Config, f Facts) Verdict {
	if f.Release == nil {
		return Verdict{Do: DoGather, Need: NeedRelease}
	}
	rel, now := f.Release.Value, f.Now
	switch {
	case rel.Done:
		shared := rel.Shared
		if shared == "" && r.OnlyShare() {
			shared = "its other holders, busy with their own work when it was warned"
		}
		return Verdict{Do: DoDone, Shared: shared}
	case now.Before(r.ReleaseBy):
		return Verdict{Do: DoWait, Until: now.Add(nextLook(now.Sub(r.ActedAt), time.Duration(c.Release.Interval))),
			Why: "carried out; waiting for the GPU to be released: " + rel.Why}
	}
	return Verdict{Do: DoNotReleased, Why: fmt.Sprintf("%s, but %s later the GPU is still held: %s", r.Detail, now.Sub(r.ActedAt).Round(time.Second), rel.Why)}
}
