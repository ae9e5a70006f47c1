// Package kube carries out the reclaimer's Kubernetes actions. It walks a
// pod's controllers to its top owner and stops that the way its own
// controller expects (see config.Workload): the scale subresource, a
// merge patch (suspend, a stop annotation), a Kueue Workload deactivated,
// a JupyterHub server stopped; only a bare pod is evicted. It also answers
// whether a pod is kept, when its workload started and whom to tell, and
// writes Events.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// fieldManager names the reclaimer's changes in managedFields.
const fieldManager = "gpureclaim-reclaimer"

// defaultRetry is how long an action that found the cluster not ready
// (a Kueue Workload not created yet) waits.
const defaultRetry = 30 * time.Second

// Hub stops and starts JupyterHub single-user servers.
type Hub interface {
	Stop(ctx context.Context, user, server string) error
	Start(ctx context.Context, user, server string) error
}

// Options configure a Client.
type Options struct {
	// Workloads are the kinds of top owner it stops (config.Config.Workloads).
	Workloads []config.Workload
	// Kueue deactivates the Kueue Workloads of the jobs Kueue admits.
	Kueue bool
	// Hub, when set, stops JupyterHub single-user servers.
	Hub Hub
	// EvictionDeadline bounds how long an eviction refused by a
	// PodDisruptionBudget is retried.
	EvictionDeadline time.Duration
	// Events writes Kubernetes Events.
	Events bool
	// DRADrivers are the DRA drivers whose devices are GPUs; default
	// names.DRADrivers.
	DRADrivers []string
	Clock      func() time.Time
	Logger     *slog.Logger
}

// Client acts on a cluster.
type Client struct {
	cs        kubernetes.Interface
	dyn       dynamic.Interface
	disco     discovery.CachedDiscoveryInterface
	mapper    meta.ResettableRESTMapper
	workloads []config.Workload
	kueue     bool
	hub       Hub
	deadline  time.Duration
	events    bool
	// draDrivers are the DRA drivers whose devices are GPUs.
	draDrivers []string
	clock      func() time.Time
	log        *slog.Logger
}

// New returns a client of the cluster rc points at.
func New(rc *rest.Config, o Options) (*Client, error) {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	disco := memory.NewMemCacheClient(cs.Discovery())
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DRADrivers == nil {
		o.DRADrivers = names.DRADrivers
	}
	return &Client{
		cs: cs, dyn: dyn, disco: disco, mapper: restmapper.NewDeferredDiscoveryRESTMapper(disco),
		workloads: o.Workloads, kueue: o.Kueue, hub: o.Hub, deadline: o.EvictionDeadline, events: o.Events,
		draDrivers: o.DRADrivers, clock: o.Clock, log: o.Logger,
	}, nil
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

// Kept says whether the pod, one of its owners or its namespace is
// marked gpureclaim.io/keep.
func (c *Client) Kept(ctx context.Context, t reclaim.Target) (bool, string, error) {
	if t.Pod == "" {
		return false, "", nil
	}
	ch, err := c.walk(ctx, t.Namespace, t.Pod)
	if errors.Is(err, reclaim.ErrGone) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	for _, o := range ch.metas() {
		if podmeta.Kept(o.GetLabels(), o.GetAnnotations()) {
			return true, describe(o) + " is marked " + podmeta.KeepKey, nil
		}
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

// Started is when the pod's workload started: its top owner's start (a
// Job's startTime, else its creation), or the pod's own for a bare pod.
func (c *Client) Started(ctx context.Context, t reclaim.Target) (time.Time, error) {
	ch, err := c.walk(ctx, t.Namespace, t.Pod)
	if err != nil {
		return time.Time{}, err
	}
	if top := ch.top(); top != nil {
		return startOf(top.obj), nil
	}
	if ch.pod.Status.StartTime != nil {
		return ch.pod.Status.StartTime.Time, nil
	}
	return ch.pod.CreationTimestamp.Time, nil
}

// Owner is the contact annotation of a pod, else of its nearest owner
// that has one, else of its namespace.
func (c *Client) Owner(ctx context.Context, t reclaim.Target) (string, error) {
	var ch *chain
	if t.Pod != "" { // a namespace's own owner (the weekly report) has no pod
		var err error
		ch, err = c.walk(ctx, t.Namespace, t.Pod)
		if err != nil && !errors.Is(err, reclaim.ErrGone) {
			return "", err
		}
	}
	if ch != nil {
		for _, o := range ch.metas() {
			if v := o.GetAnnotations()[podmeta.OwnerKey]; v != "" {
				return v, nil
			}
		}
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
	switch w := r.Stopped; {
	case w != nil && w.Stop == "":
		// Recorded before the reclaimer kept the API version: a Deployment or StatefulSet.
		objs = append(objs, corev1.ObjectReference{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, APIVersion: "apps/v1"})
	case w != nil && w.APIVersion != "":
		objs = append(objs, corev1.ObjectReference{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, APIVersion: w.APIVersion})
	case w == nil && r.TopOwner != nil && r.TopOwner.APIVersion != "":
		objs = append(objs, corev1.ObjectReference{Kind: r.TopOwner.Kind, Namespace: r.TopOwner.Namespace, Name: r.TopOwner.Name, APIVersion: r.TopOwner.APIVersion})
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
		switch reason {
		case "GPUReclaimed", "GPUIdleWarning", "GPUNotReleased", "GPUReclaimRestoreFailed":
			ev.Type = corev1.EventTypeWarning
		}
		if _, err := c.cs.CoreV1().Events(o.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			c.log.Warn("writing an event", "reason", reason, "object", o.Kind+"/"+o.Name, "err", err)
		}
	}
}
