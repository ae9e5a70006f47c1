// Package route sends each of the reclaimer's actions where it is carried
// out (pods and their top owners to Kubernetes or the JupyterHub that runs
// them, Slurm jobs to slurmrestd, processes to their node) and asks the
// same places about a target: whether it is kept, when it started, what its
// top owner is, and whether the GPU was released.
package route

import (
	"context"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/slurm"
)

// Kubernetes stops, restores and inspects pods and their top owners
// (kube.Client).
type Kubernetes interface {
	Evict(ctx context.Context, r *reclaim.Reclaim) (reclaim.Result, error)
	Stop(ctx context.Context, r *reclaim.Reclaim) (reclaim.Result, error)
	ScaleDown(ctx context.Context, r *reclaim.Reclaim, to int32) (reclaim.Result, error)
	Released(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error)
	Running(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error)
	Restore(ctx context.Context, r *reclaim.Reclaim) error
	Kept(ctx context.Context, t reclaim.Target) (bool, string, error)
	Started(ctx context.Context, t reclaim.Target) (time.Time, error)
	TopOwner(ctx context.Context, t reclaim.Target) (reclaim.TopOwner, error)
	Holders(ctx context.Context, r *reclaim.Reclaim) ([]string, error)
}

// Slurm cancels, requeues and reads jobs (slurm.Client).
type Slurm interface {
	Cancel(ctx context.Context, id string) error
	Requeue(ctx context.Context, id string) (string, error)
	Released(ctx context.Context, id string) (reclaim.Release, error)
	Job(ctx context.Context, id string) (slurm.Job, error)
}

// Nodes end processes through the exporters' action endpoints
// (node.Client).
type Nodes interface {
	Kill(ctx context.Context, r *reclaim.Reclaim) (reclaim.Result, error)
	PIDs(ctx context.Context, t reclaim.Target) ([]int, error)
	Released(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error)
	Started(ctx context.Context, t reclaim.Target) (time.Time, error)
}

// Holders says whether the exporters still see a holder on a unit
// (promquery.Client).
type Holders interface {
	Holds(ctx context.Context, uuid string, holder map[string]string) (bool, string, error)
}

// Backends are where the routes lead. Kubernetes, Slurm and Holders are
// nil when the config turns them off; Nodes is always there.
type Backends struct {
	Config     *config.Config
	Kubernetes Kubernetes
	Slurm      Slurm
	Nodes      Nodes
	// Holders, when set, confirms a release: the unit's holder series gone.
	Holders Holders
}

// Router is the engine's Actor, Verifier and Inspector over the backends.
type Router struct{ Backends }

var (
	_ reclaim.Actor     = (*Router)(nil)
	_ reclaim.Verifier  = (*Router)(nil)
	_ reclaim.Inspector = (*Router)(nil)
)

// New routes to the backends.
func New(b Backends) *Router { return &Router{b} }

// Act carries an action out where its target is held.
func (r *Router) Act(ctx context.Context, action config.Action, rc *reclaim.Reclaim) (reclaim.Result, error) {
	t := rc.Target
	switch action {
	case config.ActionKill:
		return r.Nodes.Kill(ctx, rc)
	case config.ActionCancel, config.ActionRequeue:
		if r.Slurm == nil || t.SlurmJob == "" {
			return reclaim.Result{}, &reclaim.RefusedError{Reason: string(action) + " needs a Slurm job and slurm.url; the target is " + t.Holder()}
		}
		if action == config.ActionRequeue {
			detail, err := r.Slurm.Requeue(ctx, t.SlurmJob)
			return reclaim.Result{Detail: detail}, err
		}
		if err := r.Slurm.Cancel(ctx, t.SlurmJob); err != nil {
			return reclaim.Result{}, err
		}
		return reclaim.Result{Detail: "Slurm job " + t.SlurmJob + " cancelled"}, nil
	case config.ActionEvict, config.ActionScaleDown, config.ActionStop:
		if r.Kubernetes == nil {
			return reclaim.Result{}, fmt.Errorf("%s needs Kubernetes, which is off in the config", action)
		}
		if t.Pod == "" {
			return reclaim.Result{}, fmt.Errorf("%s needs a pod; the target is %s", action, t.Holder())
		}
		switch action {
		case config.ActionEvict:
			return r.Kubernetes.Evict(ctx, rc)
		case config.ActionStop:
			return r.Kubernetes.Stop(ctx, rc)
		}
		var to int32
		if p := r.Config.Policy(rc.Policy); p != nil {
			to = p.ScaleDownTo
		}
		return r.Kubernetes.ScaleDown(ctx, rc, to)
	}
	return reclaim.Result{}, fmt.Errorf("unknown action %q", action)
}

// Plan says what an action will end: a kill's PIDs, or the pods that
// hold the GPU of a pod's action.
func (r *Router) Plan(ctx context.Context, action config.Action, rc *reclaim.Reclaim) (reclaim.Plan, error) {
	switch {
	case action == config.ActionKill:
		pids, err := r.Nodes.PIDs(ctx, rc.Target)
		return reclaim.Plan{PIDs: pids}, err
	case rc.Target.Pod != "" && r.Kubernetes != nil:
		pods, err := r.Kubernetes.Holders(ctx, rc)
		return reclaim.Plan{Pods: pods}, err
	}
	return reclaim.Plan{}, nil
}

// Released asks where the action was taken whether the GPU is free and,
// with Holders, whether the exporter still sees the holder on the unit.
func (r *Router) Released(ctx context.Context, rc *reclaim.Reclaim) (reclaim.Release, error) {
	rel, err := r.releasedWhereActed(ctx, rc)
	if err != nil || !rel.Done || r.Holders == nil {
		return rel, err
	}
	t := rc.Target
	held, q, err := r.Holders.Holds(ctx, t.UUID, map[string]string{names.LabelNamespace: t.Namespace, names.LabelPod: t.Pod, names.LabelUser: t.User, names.LabelSlurmJob: t.SlurmJob})
	if err != nil {
		return reclaim.Release{}, err
	}
	if held {
		return reclaim.Release{Why: fmt.Sprintf("%s is gone, but Prometheus still sees it hold the unit (%s)", t.Holder(), q)}, nil
	}
	return rel, nil
}

func (r *Router) releasedWhereActed(ctx context.Context, rc *reclaim.Reclaim) (reclaim.Release, error) {
	switch rc.Action {
	case config.ActionKill:
		return r.Nodes.Released(ctx, rc)
	case config.ActionCancel, config.ActionRequeue:
		if r.Slurm == nil {
			return reclaim.Release{Done: true}, nil // refused before acting
		}
		return r.Slurm.Released(ctx, rc.Target.SlurmJob)
	}
	if r.Kubernetes == nil {
		return reclaim.Release{}, fmt.Errorf("%s needs Kubernetes, which is off in the config", rc.Action)
	}
	return r.Kubernetes.Released(ctx, rc)
}

// Running asks Kubernetes whether a restored workload runs again.
func (r *Router) Running(ctx context.Context, rc *reclaim.Reclaim) (reclaim.Release, error) {
	if r.Kubernetes == nil {
		return reclaim.Release{}, reclaim.ErrNotRestorable
	}
	return r.Kubernetes.Running(ctx, rc)
}

// Restore undoes a stop or a scale-down.
func (r *Router) Restore(ctx context.Context, rc *reclaim.Reclaim) error {
	if r.Kubernetes == nil {
		return reclaim.ErrNotRestorable
	}
	return r.Kubernetes.Restore(ctx, rc)
}

// Kept says whether a person keeps the target: a Slurm job's comment, a
// pod's or its owners' annotation.
func (r *Router) Kept(ctx context.Context, t reclaim.Target) (bool, string, error) {
	if t.Pod == "" && t.SlurmJob != "" && r.Slurm != nil {
		j, err := r.Slurm.Job(ctx, t.SlurmJob)
		if err != nil {
			return false, "", err
		}
		if j.Kept() {
			return true, "Slurm job " + t.SlurmJob + "'s comment says " + slurm.KeepMarker, nil
		}
		return false, "", nil
	}
	if t.Pod == "" || r.Kubernetes == nil {
		return false, "", nil
	}
	return r.Kubernetes.Kept(ctx, t)
}

// Started says when the target's workload started: a Slurm job's start
// (not its newest process), a pod's top owner's, a process's.
func (r *Router) Started(ctx context.Context, t reclaim.Target) (time.Time, error) {
	if t.Pod == "" && t.SlurmJob != "" && r.Slurm != nil {
		j, err := r.Slurm.Job(ctx, t.SlurmJob)
		if err != nil {
			return time.Time{}, err
		}
		return j.Start, nil
	}
	if t.Pod != "" {
		if r.Kubernetes == nil {
			return time.Time{}, fmt.Errorf("cannot tell when pod %s started without Kubernetes", t.Holder())
		}
		return r.Kubernetes.Started(ctx, t)
	}
	return r.Nodes.Started(ctx, t)
}

// TopOwner finds a pod's top owner; the zero TopOwner for a bare pod, a
// process, or without Kubernetes.
func (r *Router) TopOwner(ctx context.Context, t reclaim.Target) (reclaim.TopOwner, error) {
	if t.Pod == "" || r.Kubernetes == nil {
		return reclaim.TopOwner{}, nil
	}
	return r.Kubernetes.TopOwner(ctx, t)
}
