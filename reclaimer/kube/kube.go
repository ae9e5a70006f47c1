// Package kube carries out the reclaimer's Kubernetes actions: evicting a
// pod through the Eviction API, scaling its Deployment or StatefulSet down
// through the scale subresource (and back up), and writing Events. It also
// answers whether a pod is kept and when it started.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// ReplicasAnnotation remembers a workload's replicas before a scale-down,
// so that a restore can put them back.
const ReplicasAnnotation = "gpureclaim.io/replicas-before-scale-down"

// Client acts on a cluster.
type Client struct {
	cs       kubernetes.Interface
	deadline time.Duration
	events   bool
	clock    func() time.Time
	log      *slog.Logger
}

// New returns a client. deadline bounds how long an eviction refused by a
// PodDisruptionBudget is retried.
func New(cs kubernetes.Interface, deadline time.Duration, events bool, clock func() time.Time, log *slog.Logger) *Client {
	return &Client{cs: cs, deadline: deadline, events: events, clock: clock, log: log}
}

// Evict asks the API server to evict a pod, honouring PodDisruptionBudgets.
// A refusal (429) is returned as a RetryError until the deadline since the
// action was due, then as a failure. The request is made without
// client-go's own retries, which would block on a refusal for the whole
// context.
func (c *Client) Evict(ctx context.Context, r *reclaim.Reclaim) (reclaim.Result, error) {
	ns, name := r.Target.Namespace, r.Target.Pod
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	res := c.cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(name).SubResource("eviction").
		Body(ev).MaxRetries(0).Do(ctx)
	err := res.Error()
	switch {
	case err == nil:
		return reclaim.Result{Detail: fmt.Sprintf("pod %s/%s evicted", ns, name)}, nil
	case apierrors.IsNotFound(err):
		return reclaim.Result{}, reclaim.ErrGone
	case apierrors.IsTooManyRequests(err):
		if c.clock().Sub(r.ActAt) > c.deadline {
			return reclaim.Result{}, fmt.Errorf("eviction of %s/%s refused by a PodDisruptionBudget for %s: %w", ns, name, c.deadline, err)
		}
		after := 30 * time.Second
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return reclaim.Result{}, &reclaim.RetryError{After: after, Err: fmt.Errorf("eviction of %s/%s refused by a PodDisruptionBudget", ns, name)}
	}
	return reclaim.Result{}, fmt.Errorf("evicting %s/%s: %w", ns, name, err)
}

// Controller finds what runs a pod: its Deployment (through its
// ReplicaSet) or StatefulSet with the replicas it asks for, or the kind
// and name of any other controller; nothing for a bare pod.
func (c *Client) Controller(ctx context.Context, t reclaim.Target) (reclaim.Controller, error) {
	p, err := c.cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return reclaim.Controller{}, reclaim.ErrGone
	}
	if err != nil {
		return reclaim.Controller{}, err
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return reclaim.Controller{}, nil
	}
	ctl := reclaim.Controller{Kind: ref.Kind, Name: ref.Name}
	switch ref.Kind {
	case "ReplicaSet":
		rs, err := c.cs.AppsV1().ReplicaSets(t.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return reclaim.Controller{}, err
		}
		d := metav1.GetControllerOf(rs)
		if d == nil || d.Kind != "Deployment" {
			return ctl, nil
		}
		ctl = reclaim.Controller{Kind: "Deployment", Name: d.Name}
	case "StatefulSet":
	default:
		return ctl, nil
	}
	s, err := c.scalerFor(ctl.Kind, t.Namespace, ctl.Name)
	if err != nil {
		return reclaim.Controller{}, err
	}
	if ctl.Replicas, _, err = s.get(ctx); err != nil {
		return reclaim.Controller{}, err
	}
	return ctl, nil
}

// workload finds the Deployment or StatefulSet that owns a pod.
func (c *Client) workload(ctx context.Context, ns, pod string) (kind, name string, err error) {
	p, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return "", "", fmt.Errorf("pod %s/%s has no controller to scale down", ns, pod)
	}
	switch ref.Kind {
	case "StatefulSet":
		return "StatefulSet", ref.Name, nil
	case "ReplicaSet":
		rs, err := c.cs.AppsV1().ReplicaSets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", "", err
		}
		if d := metav1.GetControllerOf(rs); d != nil && d.Kind == "Deployment" {
			return "Deployment", d.Name, nil
		}
		return "", "", fmt.Errorf("replica set %s/%s has no Deployment to scale down", ns, ref.Name)
	}
	return "", "", fmt.Errorf("pod %s/%s belongs to a %s, which gpureclaim does not scale", ns, pod, ref.Kind)
}

type scaler struct {
	get    func(ctx context.Context) (int32, map[string]string, error)
	scale  func(ctx context.Context, replicas int32) error
	patch  func(ctx context.Context, annotation *string) error
	kind   string
	ns     string
	name   string
	target string
}

func (c *Client) scalerFor(kind, ns, name string) (*scaler, error) {
	s := &scaler{kind: kind, ns: ns, name: name}
	var patch func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) error
	switch kind {
	case "Deployment":
		d := c.cs.AppsV1().Deployments(ns)
		s.get = func(ctx context.Context) (int32, map[string]string, error) {
			sc, err := d.GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				return 0, nil, err
			}
			obj, err := d.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return 0, nil, err
			}
			return sc.Spec.Replicas, obj.Annotations, nil
		}
		s.scale = func(ctx context.Context, n int32) error {
			sc, err := d.GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			sc.Spec.Replicas = n
			_, err = d.UpdateScale(ctx, name, sc, metav1.UpdateOptions{})
			return err
		}
		patch = func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) error {
			_, err := d.Patch(ctx, name, pt, data, opts, sub...)
			return err
		}
	case "StatefulSet":
		st := c.cs.AppsV1().StatefulSets(ns)
		s.get = func(ctx context.Context) (int32, map[string]string, error) {
			sc, err := st.GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				return 0, nil, err
			}
			obj, err := st.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return 0, nil, err
			}
			return sc.Spec.Replicas, obj.Annotations, nil
		}
		s.scale = func(ctx context.Context, n int32) error {
			sc, err := st.GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			sc.Spec.Replicas = n
			_, err = st.UpdateScale(ctx, name, sc, metav1.UpdateOptions{})
			return err
		}
		patch = func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) error {
			_, err := st.Patch(ctx, name, pt, data, opts, sub...)
			return err
		}
	default:
		return nil, fmt.Errorf("cannot scale a %s", kind)
	}
	s.patch = func(ctx context.Context, v *string) error {
		val := "null"
		if v != nil {
			val = strconv.Quote(*v)
		}
		body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, ReplicasAnnotation, val)
		return patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: "gpureclaim-reclaimer"})
	}
	return s, nil
}

// ScaleDown scales the pod's Deployment or StatefulSet to `to` replicas,
// first writing its current replicas into an annotation. Run again, it
// finds the annotation and the replicas already down, and does nothing.
func (c *Client) ScaleDown(ctx context.Context, r *reclaim.Reclaim, to int32) (reclaim.Result, error) {
	ns := r.Target.Namespace
	var kind, name string
	if r.Workload != nil {
		kind, name = r.Workload.Kind, r.Workload.Name
	} else {
		var err error
		kind, name, err = c.workload(ctx, ns, r.Target.Pod)
		if apierrors.IsNotFound(err) {
			return reclaim.Result{}, reclaim.ErrGone
		}
		if err != nil {
			return reclaim.Result{}, err
		}
	}
	s, err := c.scalerFor(kind, ns, name)
	if err != nil {
		return reclaim.Result{}, err
	}
	replicas, ann, err := s.get(ctx)
	if err != nil {
		return reclaim.Result{}, fmt.Errorf("reading the scale of %s %s/%s: %w", kind, ns, name, err)
	}
	prev := replicas
	if v, ok := ann[ReplicasAnnotation]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			prev = int32(n) // scaled down before (a retry): keep the first count
		}
	} else {
		v := strconv.Itoa(int(replicas))
		if err := s.patch(ctx, &v); err != nil {
			return reclaim.Result{}, fmt.Errorf("annotating %s %s/%s: %w", kind, ns, name, err)
		}
	}
	if replicas != to {
		if err := s.scale(ctx, to); err != nil {
			return reclaim.Result{}, fmt.Errorf("scaling %s %s/%s: %w", kind, ns, name, err)
		}
	}
	w := &reclaim.Workload{Kind: kind, Namespace: ns, Name: name, PreviousReplicas: prev, ScaledTo: to}
	return reclaim.Result{Workload: w, Detail: fmt.Sprintf("%s %s/%s scaled from %d to %d replicas", kind, ns, name, prev, to)}, nil
}

// Restore scales a workload back to the replicas its annotation remembers
// and removes the annotation.
func (c *Client) Restore(ctx context.Context, r *reclaim.Reclaim) error {
	w := r.Workload
	s, err := c.scalerFor(w.Kind, w.Namespace, w.Name)
	if err != nil {
		return err
	}
	_, ann, err := s.get(ctx)
	if err != nil {
		return fmt.Errorf("reading %s %s/%s: %w", w.Kind, w.Namespace, w.Name, err)
	}
	replicas := w.PreviousReplicas
	if v, ok := ann[ReplicasAnnotation]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			replicas = int32(n)
		}
	}
	if err := s.scale(ctx, replicas); err != nil {
		return fmt.Errorf("scaling %s %s/%s back: %w", w.Kind, w.Namespace, w.Name, err)
	}
	return s.patch(ctx, nil)
}

// Kept says whether the pod or its namespace is marked gpureclaim.io/keep.
func (c *Client) Kept(ctx context.Context, t reclaim.Target) (bool, string, error) {
	if t.Pod == "" {
		return false, "", nil
	}
	p, err := c.cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	if podmeta.Kept(p.Labels, p.Annotations) {
		return true, "the pod is marked " + podmeta.KeepKey, nil
	}
	ns, err := c.cs.CoreV1().Namespaces().Get(ctx, t.Namespace, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	if podmeta.Kept(ns.Labels, ns.Annotations) {
		return true, "namespace " + t.Namespace + " is marked " + podmeta.KeepKey, nil
	}
	return false, "", nil
}

// Started is the pod's start.
func (c *Client) Started(ctx context.Context, t reclaim.Target) (time.Time, error) {
	p, err := c.cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}, reclaim.ErrGone
	}
	if err != nil {
		return time.Time{}, err
	}
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time, nil
	}
	return p.CreationTimestamp.Time, nil
}

// Owner is the contact annotation of a pod or, failing that, its namespace.
func (c *Client) Owner(ctx context.Context, t reclaim.Target) (string, error) {
	p, err := c.cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err == nil && p.Annotations[podmeta.OwnerKey] != "" {
		return p.Annotations[podmeta.OwnerKey], nil
	}
	ns, err := c.cs.CoreV1().Namespaces().Get(ctx, t.Namespace, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ns.Annotations[podmeta.OwnerKey], nil
}

// Event writes an Event on the pod and, after a scale-down, on the workload.
func (c *Client) Event(ctx context.Context, r *reclaim.Reclaim, reason, message string) {
	if !c.events || r.Target.Pod == "" {
		return
	}
	objs := []corev1.ObjectReference{{Kind: "Pod", Namespace: r.Target.Namespace, Name: r.Target.Pod, APIVersion: "v1"}}
	if r.Workload != nil {
		objs = append(objs, corev1.ObjectReference{Kind: r.Workload.Kind, Namespace: r.Workload.Namespace, Name: r.Workload.Name, APIVersion: "apps/v1"})
	}
	now := metav1.NewTime(c.clock())
	for _, o := range objs {
		if o.Kind == "Pod" {
			if p, err := c.cs.CoreV1().Pods(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
				o.UID = p.UID
			}
		}
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: o.Name + ".", Namespace: o.Namespace},
			InvolvedObject: o,
			Reason:         reason,
			Message:        message,
			Type:           corev1.EventTypeNormal,
			Source:         corev1.EventSource{Component: "gpureclaim-reclaimer"},
			FirstTimestamp: now,
			LastTimestamp:  now,
			Count:          1,
		}
		if reason == "GPUReclaimed" || reason == "GPUIdleWarning" {
			ev.Type = corev1.EventTypeWarning
		}
		if _, err := c.cs.CoreV1().Events(o.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			c.log.Warn("writing an event", "reason", reason, "object", o.Kind+"/"+o.Name, "err", err)
		}
	}
}

// ErrNoPod says a Kubernetes action was asked for a target without a pod.
var ErrNoPod = errors.New("the target is not a pod")
