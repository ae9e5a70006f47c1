package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/node"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/slurm"
)

// actor sends each action where it belongs: pods and their owners to
// Kubernetes (or the JupyterHub that runs them), Slurm jobs to slurmrestd,
// processes to their node.
type actor struct {
	cfg   *config.Config
	kube  *kube.Client  // nil without Kubernetes
	slurm *slurm.Client // nil without Slurm
	nodes *node.Client
	// prom, when set, confirms a release: the unit's holder series gone.
	prom *promquery.Client
}

func (a *actor) Act(ctx context.Context, action string, r *reclaim.Reclaim) (reclaim.Result, error) {
	switch action {
	case config.ActionKill:
		return a.nodes.Kill(ctx, r)
	case config.ActionCancel, config.ActionRequeue:
		if a.slurm == nil || r.Target.SlurmJob == "" {
			return reclaim.Result{}, &reclaim.RefusedError{Reason: action + " needs a Slurm job and slurm.url; the target is " + r.Target.Holder()}
		}
		if action == config.ActionRequeue {
			detail, err := a.slurm.Requeue(ctx, r.Target.SlurmJob)
			return reclaim.Result{Detail: detail}, err
		}
		if err := a.slurm.Cancel(ctx, r.Target.SlurmJob); err != nil {
			return reclaim.Result{}, err
		}
		return reclaim.Result{Detail: "Slurm job " + r.Target.SlurmJob + " cancelled"}, nil
	case config.ActionEvict, config.ActionScaleDown, config.ActionStop:
		if a.kube == nil {
			return reclaim.Result{}, fmt.Errorf("%s needs Kubernetes, which is off in the config", action)
		}
		if r.Target.Pod == "" {
			return reclaim.Result{}, fmt.Errorf("%s needs a pod; the target is %s", action, r.Target.Holder())
		}
		switch action {
		case config.ActionEvict:
			return a.kube.Evict(ctx, r)
		case config.ActionStop:
			return a.kube.Stop(ctx, r)
		}
		var to int32
		if p := a.cfg.Policy(r.Policy); p != nil {
			to = p.ScaleDownTo
		}
		return a.kube.ScaleDown(ctx, r, to)
	}
	return reclaim.Result{}, fmt.Errorf("unknown action %q", action)
}

// Plan lists the PIDs a kill will end.
func (a *actor) Plan(ctx context.Context, action string, r *reclaim.Reclaim) ([]int, error) {
	if action != config.ActionKill {
		return nil, nil
	}
	return a.nodes.PIDs(ctx, r.Target)
}

// Released asks where the action was taken whether the GPU is free and,
// where Prometheus is configured, whether the exporter still sees the
// holder on the unit.
func (a *actor) Released(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	rel, err := a.releasedWhereActed(ctx, r)
	if err != nil || !rel.Done || a.prom == nil {
		return rel, err
	}
	t := r.Target
	held, q, err := a.prom.Holds(ctx, t.UUID, map[string]string{names.LabelNamespace: t.Namespace, names.LabelPod: t.Pod, names.LabelUser: t.User, names.LabelSlurmJob: t.SlurmJob})
	if err != nil {
		return reclaim.Release{}, err
	}
	if held {
		return reclaim.Release{Why: fmt.Sprintf("%s is gone, but Prometheus still sees it hold the unit (%s)", t.Holder(), q)}, nil
	}
	return rel, nil
}

func (a *actor) releasedWhereActed(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	switch r.Action {
	case config.ActionKill:
		return a.nodes.Released(ctx, r)
	case config.ActionCancel, config.ActionRequeue:
		if a.slurm == nil {
			return reclaim.Release{Done: true}, nil // refused before acting
		}
		return a.slurm.Released(ctx, r.Target.SlurmJob)
	}
	if a.kube == nil {
		return reclaim.Release{}, fmt.Errorf("%s needs Kubernetes, which is off in the config", r.Action)
	}
	return a.kube.Released(ctx, r)
}

// Running asks Kubernetes whether a restored workload runs again.
func (a *actor) Running(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	if a.kube == nil {
		return reclaim.Release{}, reclaim.ErrNotRestorable
	}
	return a.kube.Running(ctx, r)
}

func (a *actor) Restore(ctx context.Context, r *reclaim.Reclaim) error {
	if a.kube == nil {
		return reclaim.ErrNotRestorable
	}
	return a.kube.Restore(ctx, r)
}

// inspector asks Kubernetes about pods, Slurm about jobs and nodes about
// processes.
type inspector struct {
	kube  *kube.Client
	slurm *slurm.Client
	nodes *node.Client
}

func (i *inspector) Kept(ctx context.Context, t reclaim.Target) (bool, string, error) {
	if t.Pod == "" && t.SlurmJob != "" && i.slurm != nil {
		j, err := i.slurm.Job(ctx, t.SlurmJob)
		if err != nil {
			return false, "", err
		}
		if j.Kept() {
			return true, "Slurm job " + t.SlurmJob + "'s comment says " + slurm.KeepMarker, nil
		}
		return false, "", nil
	}
	if t.Pod == "" || i.kube == nil {
		return false, "", nil
	}
	return i.kube.Kept(ctx, t)
}

func (i *inspector) Started(ctx context.Context, t reclaim.Target) (time.Time, error) {
	if t.Pod == "" && t.SlurmJob != "" && i.slurm != nil {
		// The minimum runtime counts from the job's start, not its newest process.
		j, err := i.slurm.Job(ctx, t.SlurmJob)
		if err != nil {
			return time.Time{}, err
		}
		return j.Start, nil
	}
	if t.Pod != "" {
		if i.kube == nil {
			return time.Time{}, fmt.Errorf("cannot tell when pod %s started without Kubernetes", t.Holder())
		}
		return i.kube.Started(ctx, t)
	}
	return i.nodes.Started(ctx, t)
}

func (i *inspector) TopOwner(ctx context.Context, t reclaim.Target) (reclaim.TopOwner, error) {
	if t.Pod == "" || i.kube == nil {
		return reclaim.TopOwner{}, nil
	}
	return i.kube.TopOwner(ctx, t)
}
