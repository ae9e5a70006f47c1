package route_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/route"
	"github.com/gpureclaim/gpureclaim/reclaimer/slurm"
)

// calls records what each backend was asked, as "backend method arg".
type calls []string

func (c *calls) add(format string, args ...any) { *c = append(*c, fmt.Sprintf(format, args...)) }

type kube struct{ c *calls }

func (k kube) Evict(_ context.Context, r *reclaim.Reclaim) (reclaim.Result, error) {
	k.c.add("kube evict %s", r.Target.Pod)
	return reclaim.Result{}, nil
}
func (k kube) Stop(_ context.Context, r *reclaim.Reclaim) (reclaim.Result, error) {
	k.c.add("kube stop %s", r.Target.Pod)
	return reclaim.Result{}, nil
}
func (k kube) ScaleDown(_ context.Context, r *reclaim.Reclaim, to int32) (reclaim.Result, error) {
	k.c.add("kube scale_down %s to %d", r.Target.Pod, to)
	return reclaim.Result{}, nil
}
func (k kube) Released(_ context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	k.c.add("kube released %s", r.Target.Pod)
	return reclaim.Release{Done: true}, nil
}
func (k kube) Running(_ context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	k.c.add("kube running %s", r.Target.Pod)
	return reclaim.Release{Done: true}, nil
}
func (k kube) Restore(_ context.Context, r *reclaim.Reclaim) error {
	k.c.add("kube restore %s", r.Target.Pod)
	return nil
}
func (k kube) Kept(_ context.Context, t reclaim.Target) (bool, string, error) {
	k.c.add("kube kept %s", t.Pod)
	return false, "", nil
}
func (k kube) Started(_ context.Context, t reclaim.Target) (time.Time, error) {
	k.c.add("kube started %s", t.Pod)
	return time.Time{}, nil
}
func (k kube) TopOwner(_ context.Context, t reclaim.Target) (reclaim.TopOwner, error) {
	k.c.add("kube top_owner %s", t.Pod)
	return reclaim.TopOwner{Kind: "Job"}, nil
}
func (k kube) Holders(_ context.Context, r *reclaim.Reclaim) ([]string, error) {
	k.c.add("kube holders %s", r.Target.Pod)
	return []string{r.Target.Namespace + "/" + r.Target.Pod + "/uid"}, nil
}

type slurmd struct {
	c    *calls
	kept bool
}

func (s slurmd) Cancel(_ context.Context, id string) error {
	s.c.add("slurm cancel %s", id)
	return nil
}
func (s slurmd) Requeue(_ context.Context, id string) (string, error) {
	s.c.add("slurm requeue %s", id)
	return "requeued", nil
}
func (s slurmd) Released(_ context.Context, id string) (reclaim.Release, error) {
	s.c.add("slurm released %s", id)
	return reclaim.Release{Done: true}, nil
}
func (s slurmd) Job(_ context.Context, id string) (slurm.Job, error) {
	s.c.add("slurm job %s", id)
	j := slurm.Job{ID: id, Start: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	if s.kept {
		j.Comment = slurm.KeepMarker
	}
	return j, nil
}

type nodes struct{ c *calls }

func (n nodes) Kill(_ context.Context, r *reclaim.Reclaim) (reclaim.Result, error) {
	n.c.add("node kill %s", r.Target.User)
	return reclaim.Result{}, nil
}
func (n nodes) PIDs(_ context.Context, t reclaim.Target) ([]int, error) {
	n.c.add("node pids %s", t.User)
	return []int{42}, nil
}
func (n nodes) Released(_ context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	n.c.add("node released %s", r.Target.User)
	return reclaim.Release{Done: true}, nil
}
func (n nodes) Started(_ context.Context, t reclaim.Target) (time.Time, error) {
	n.c.add("node started %s", t.User)
	return time.Time{}, nil
}

type holders struct {
	c    *calls
	held bool
}

func (h holders) Holds(_ context.Context, uuid string, holder map[string]string) (bool, string, error) {
	h.c.add("prometheus holds %s %s%s", uuid, holder["pod"], holder["user"])
	return h.held, "q", nil
}

var (
	pod     = reclaim.Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "nb-0"}
	process = reclaim.Target{UUID: "GPU-2", Node: "n1", User: "bob"}
	job     = reclaim.Target{UUID: "GPU-3", Node: "n1", User: "carol", SlurmJob: "77"}
)

// router routes to fakes: the nodes, and the backends on names.
func router(c *calls, on ...string) *route.Router {
	cfg := &config.Config{Policies: []config.Policy{{Name: "services", ScaleDownTo: 1}}}
	b := route.Backends{Config: cfg, Nodes: nodes{c}}
	for _, o := range on {
		switch o {
		case "kube":
			b.Kubernetes = kube{c}
		case "slurm":
			b.Slurm = slurmd{c: c}
		case "prometheus":
			b.Holders = holders{c: c}
		}
	}
	return route.New(b)
}

func TestAct(t *testing.T) {
	all := []string{"kube", "slurm", "prometheus"}
	for _, tc := range []struct {
		name   string
		action config.Action
		target reclaim.Target
		on     []string
		want   []string
		err    string
	}{
		{"a kill goes to the node", config.ActionKill, process, all, []string{"node kill bob"}, ""},
		{"an eviction to Kubernetes", config.ActionEvict, pod, all, []string{"kube evict nb-0"}, ""},
		{"a stop to Kubernetes", config.ActionStop, pod, all, []string{"kube stop nb-0"}, ""},
		{"a scale-down to the policy's replicas", config.ActionScaleDown, pod, all, []string{"kube scale_down nb-0 to 1"}, ""},
		{"a cancel to slurmrestd", config.ActionCancel, job, all, []string{"slurm cancel 77"}, ""},
		{"a requeue to slurmrestd", config.ActionRequeue, job, all, []string{"slurm requeue 77"}, ""},
		{"a stop without Kubernetes", config.ActionStop, pod, nil, nil, "needs Kubernetes, which is off"},
		{"an eviction of a process", config.ActionEvict, process, all, nil, "needs a pod; the target is bob"},
		{"a cancel without Slurm", config.ActionCancel, job, []string{"kube"}, nil, "needs a Slurm job and slurm.url"},
		{"a cancel of a pod", config.ActionCancel, pod, all, nil, "needs a Slurm job"},
		{"an action nobody knows", "reboot", pod, all, nil, `unknown action "reboot"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c calls
			r := &reclaim.Reclaim{Policy: "services", Action: tc.action, Target: tc.target}
			_, err := router(&c, tc.on...).Act(context.Background(), tc.action, r)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, []string(c))
			var refused *reclaim.RefusedError
			require.Equal(t, tc.name == "a cancel without Slurm" || tc.name == "a cancel of a pod", errors.As(err, &refused), "a cancel that cannot go anywhere is refused, not retried")
		})
	}
}

func TestReleased(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action config.Action
		target reclaim.Target
		on     []string
		held   bool
		done   bool
		want   []string
	}{
		{"a kill: the node, then Prometheus", config.ActionKill, process, []string{"prometheus"}, false, true, []string{"node released bob", "prometheus holds GPU-2 bob"}},
		{"a stop: Kubernetes, then Prometheus", config.ActionStop, pod, []string{"kube", "prometheus"}, false, true, []string{"kube released nb-0", "prometheus holds GPU-1 nb-0"}},
		{"a cancel: slurmrestd", config.ActionCancel, job, []string{"slurm"}, false, true, []string{"slurm released 77"}},
		{"the holder still seen", config.ActionStop, pod, []string{"kube", "prometheus"}, true, false, []string{"kube released nb-0", "prometheus holds GPU-1 nb-0"}},
		{"a cancel refused before it was made", config.ActionCancel, job, nil, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c calls
			rt := router(&c, tc.on...)
			if tc.held {
				rt.Holders = holders{c: &c, held: true}
			}
			rel, err := rt.Released(context.Background(), &reclaim.Reclaim{Action: tc.action, Target: tc.target})
			require.NoError(t, err)
			require.Equal(t, tc.done, rel.Done)
			if tc.held {
				require.Contains(t, rel.Why, "Prometheus still sees it hold the unit")
			}
			require.Equal(t, tc.want, []string(c))
		})
	}
}

func TestInspect(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		target reclaim.Target
		on     []string
		want   []string
	}{
		{"a pod: Kubernetes", pod, []string{"kube", "slurm"}, []string{"kube kept nb-0", "kube started nb-0", "kube top_owner nb-0"}},
		{"a Slurm job: its comment and start", job, []string{"kube", "slurm"}, []string{"slurm job 77", "slurm job 77"}},
		{"a process: its node", process, []string{"kube", "slurm"}, []string{"node started bob"}},
		{"a pod without Kubernetes: kept by nothing, no owner", pod, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c calls
			rt := router(&c, tc.on...)
			_, _, err := rt.Kept(ctx, tc.target)
			require.NoError(t, err)
			_, err = rt.Started(ctx, tc.target)
			if tc.target.Pod != "" && rt.Kubernetes == nil {
				require.ErrorContains(t, err, "without Kubernetes")
			} else {
				require.NoError(t, err)
			}
			_, err = rt.TopOwner(ctx, tc.target)
			require.NoError(t, err)
			require.Equal(t, tc.want, []string(c))
		})
	}

	var c calls
	rt := router(&c, "slurm")
	rt.Slurm = slurmd{c: &c, kept: true}
	kept, why, err := rt.Kept(ctx, job)
	require.NoError(t, err)
	require.True(t, kept)
	require.Contains(t, why, "Slurm job 77's comment says "+slurm.KeepMarker)
	started, err := rt.Started(ctx, job)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC), started, "a job's minimum runtime counts from its start")
}

func TestRestore(t *testing.T) {
	var c calls
	require.ErrorIs(t, router(&c).Restore(context.Background(), &reclaim.Reclaim{Target: pod}), reclaim.ErrNotRestorable)
	_, err := router(&c).Running(context.Background(), &reclaim.Reclaim{Target: pod})
	require.ErrorIs(t, err, reclaim.ErrNotRestorable)
	require.NoError(t, router(&c, "kube").Restore(context.Background(), &reclaim.Reclaim{Target: pod}))
	require.Equal(t, []string{"kube restore nb-0"}, []string(c))

	plan, err := router(&c).Plan(context.Background(), config.ActionKill, &reclaim.Reclaim{Target: process})
	require.NoError(t, err)
	require.Equal(t, reclaim.Plan{PIDs: []int{42}}, plan)
	plan, err = router(&c).Plan(context.Background(), config.ActionStop, &reclaim.Reclaim{Target: pod})
	require.NoError(t, err)
	require.Equal(t, reclaim.Plan{}, plan, "no pods without Kubernetes")
	plan, err = router(&c, "kube").Plan(context.Background(), config.ActionStop, &reclaim.Reclaim{Target: pod})
	require.NoError(t, err)
	require.Equal(t, reclaim.Plan{Pods: []string{pod.Namespace + "/" + pod.Pod + "/uid"}}, plan, "a pod's action waits for the pods that held the GPU")
}
