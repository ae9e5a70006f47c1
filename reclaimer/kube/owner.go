package kube

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// maxChain bounds the walk up a pod's owners (a cycle is a broken cluster).
const maxChain = 8

// link is one owner on a pod's chain of controllers.
type link struct {
	gvr  schema.GroupVersionResource
	kind string
	obj  *unstructured.Unstructured
	// workload is the declared kind, if any (disabled ones included).
	workload *config.Workload
}

// chain is a pod and its owners, nearest first. unread names an owner
// above the last link that could not be read, and why.
type chain struct {
	pod       *corev1.Pod
	links     []link
	unread    string
	unreadRef *metav1.OwnerReference
}

// stopAt ends the walk at an owner it cannot read, saying why.
func (ch *chain) stopAt(ref *metav1.OwnerReference, why string) {
	ch.unread = fmt.Sprintf("%s %s/%s, %s", ref.Kind, ch.pod.Namespace, ref.Name, why)
	ch.unreadRef = ref
}

func (ch *chain) top() *link {
	if len(ch.links) == 0 {
		return nil
	}
	return &ch.links[len(ch.links)-1]
}

// metas are the pod's and its owners' labels and annotations, pod first.
func (ch *chain) metas() []metav1.Object {
	out := []metav1.Object{ch.pod}
	for _, l := range ch.links {
		out = append(out, l.obj)
	}
	return out
}

// workloadFor finds the declared kind for a group and kind, disabled or not.
func (c *Client) workloadFor(group, kind string) *config.Workload {
	return config.FindWorkload(c.workloads, group, kind)
}

// resourceFor maps an owner reference to its resource: from the declared
// kinds, else through discovery.
func (c *Client) resourceFor(gv schema.GroupVersion, kind string) (schema.GroupVersionResource, *config.Workload, error) {
	if w := c.workloadFor(gv.Group, kind); w != nil {
		return gv.WithResource(w.Resource), w, nil
	}
	m, err := c.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: kind}, gv.Version)
	if err != nil {
		return schema.GroupVersionResource{}, nil, err
	}
	return m.Resource, nil, nil
}

// walk reads a pod and its controllers up to the top. A CronJob is not
// climbed into: its Jobs are stopped one by one and its schedule stays.
func (c *Client) walk(ctx context.Context, ns, pod string) (*chain, error) {
	p, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, reclaim.ErrGone
	}
	if err != nil {
		return nil, err
	}
	return c.walkPod(ctx, p)
}

// walkPod reads the controllers of a pod already read.
func (c *Client) walkPod(ctx context.Context, p *corev1.Pod) (*chain, error) {
	ns := p.Namespace
	ch := &chain{pod: p}
	ref := metav1.GetControllerOf(p)
	for ref != nil && len(ch.links) < maxChain {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			ch.stopAt(ref, fmt.Sprintf("whose apiVersion %q is not valid", ref.APIVersion))
			break
		}
		if gv.Group == "batch" && ref.Kind == "CronJob" {
			break
		}
		gvr, w, err := c.resourceFor(gv, ref.Kind)
		if err != nil {
			ch.stopAt(ref, fmt.Sprintf("a kind the API server does not serve (%v)", err))
			break
		}
		u, err := c.dyn.Resource(gvr).Namespace(ns).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			ch.stopAt(ref, "which is gone (the pod is being collected)")
		case apierrors.IsForbidden(err):
			ch.stopAt(ref, "which the reclaimer may not read")
		case err != nil:
			return nil, fmt.Errorf("reading %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
		}
		if ch.unread != "" {
			break
		}
		ch.links = append(ch.links, link{gvr: gvr, kind: ref.Kind, obj: u, workload: w})
		ref = metav1.GetControllerOf(u)
	}
	return ch, nil
}

// TopOwner finds a pod's top owner and how the reclaimer stops it.
func (c *Client) TopOwner(ctx context.Context, t reclaim.Target) (reclaim.TopOwner, error) {
	ch, err := c.walk(ctx, t.Namespace, t.Pod)
	if err != nil {
		return reclaim.TopOwner{}, err
	}
	topOwner, err := c.decide(ctx, ch)
	if err != nil {
		return topOwner, err
	}
	topOwner.Claims = c.claims(ctx, ch.pod, topOwner)
	return topOwner, nil
}

func (c *Client) decide(ctx context.Context, ch *chain) (reclaim.TopOwner, error) {
	top := ch.top()
	if ch.unread != "" {
		ref := ch.unreadRef
		return reclaim.TopOwner{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ch.pod.Namespace, Name: ref.Name, Stop: reclaim.StopNone,
			Why: fmt.Sprintf("the pod is owned by %s; gpureclaim cannot stop it: declare its kind under `workloads:` (and grant get and patch on it)", ch.unread)}, nil
	}
	if obj, ok := kueueManaged(ch); ok {
		topOwner := reclaim.TopOwner{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
			Stop: reclaim.StopKueue, Stopped: "stopped through its Kueue Workload"}
		if !c.kueue {
			topOwner.Stop = reclaim.StopNone
			topOwner.Why = fmt.Sprintf("Kueue admits %s and would undo a suspend behind its back; deactivating Kueue Workloads is off in the config (kubernetes.kueue.enabled)", topOwner)
		}
		return topOwner, nil
	}
	if top == nil {
		if user, server, ok := hubServer(ch.pod); ok && c.hub != nil {
			name := user
			if server != "" {
				name += "/" + server
			}
			return reclaim.TopOwner{Kind: "JupyterHub server", Name: name, Stop: reclaim.StopHub, Stopped: "stopped through the hub"}, nil
		}
		return reclaim.TopOwner{}, nil
	}
	topOwner := reclaim.TopOwner{APIVersion: top.obj.GetAPIVersion(), Kind: top.kind, Namespace: top.obj.GetNamespace(), Name: top.obj.GetName()}
	w := top.workload
	switch {
	case w != nil && w.Disabled:
		topOwner.Stop = reclaim.StopNone
		topOwner.Why = fmt.Sprintf("the pod is owned by %s; stopping %s is turned off in the config (workloads: %s)", topOwner, w.Kind, w.Name)
		return topOwner, nil
	case w != nil && top.kind == rayJob && top.gvr.Group == rayGroup:
		return c.decideRayJob(ch, top, topOwner), nil
	case w != nil && !w.Scale:
		topOwner.Stop, topOwner.Stopped = reclaim.StopPatch, w.Stopped
		return topOwner, nil
	case w == nil && !c.hasScale(top.gvr):
		topOwner.Stop = reclaim.StopNone
		topOwner.Why = fmt.Sprintf("the pod is owned by %s, which gpureclaim cannot stop; declare it under `workloads:`", topOwner)
		return topOwner, nil
	}
	if top.gvr.Group == "apps" && top.kind == "StatefulSet" {
		// Scaled down, such a StatefulSet deletes its pods' volumes: a
		// restore would bring back empty ones.
		if when, _, _ := unstructured.NestedString(top.obj.Object, "spec", "persistentVolumeClaimRetentionPolicy", "whenScaled"); when == "Delete" {
			topOwner.Stop = reclaim.StopNone
			topOwner.Why = fmt.Sprintf("%s deletes its pods' volumes when it is scaled down (persistentVolumeClaimRetentionPolicy.whenScaled: Delete): a scale-down would lose them, so the owner is told", topOwner)
			return topOwner, nil
		}
	}
	replicas, err := c.replicas(ctx, top.gvr, topOwner.Namespace, topOwner.Name)
	if err != nil {
		return reclaim.TopOwner{}, fmt.Errorf("reading the scale of %s: %w", topOwner, err)
	}
	topOwner.Stop, topOwner.Replicas, topOwner.Stopped = reclaim.StopScale, replicas, "scaled down"
	return topOwner, nil
}

// KubeRay's kinds.
const (
	rayGroup   = "ray.io"
	rayJob     = "RayJob"
	rayCluster = "RayCluster"
)

// decideRayJob suspends a RayJob only where KubeRay 1.5 honours it:
// shutdownAfterJobFinishes true, no clusterSelector, and the job
// Initializing or Running. Elsewhere KubeRay refuses the suspend for good
// (ValidationFailed) or ignores it (Waiting, in InteractiveMode), and its
// RayCluster is suspended instead, which KubeRay honours in every state
// and the RayJob does not undo.
func (c *Client) decideRayJob(ch *chain, top *link, topOwner reclaim.TopOwner) reclaim.TopOwner {
	why := rayJobUnsuspendable(top.obj)
	if why == "" {
		topOwner.Stop, topOwner.Stopped = reclaim.StopPatch, top.workload.Stopped
		return topOwner
	}
	above := topOwner
	for _, l := range ch.links {
		if l.kind != rayCluster || l.gvr.Group != rayGroup {
			continue
		}
		rc := reclaim.TopOwner{APIVersion: l.obj.GetAPIVersion(), Kind: l.kind, Namespace: l.obj.GetNamespace(), Name: l.obj.GetName(), Above: &above}
		if w := l.workload; w == nil || w.Disabled || w.Scale {
			rc.Stop, rc.Why = reclaim.StopNone, fmt.Sprintf("%s; stopping RayCluster is turned off in the config", why)
			return rc
		}
		rc.Stop, rc.Stopped = reclaim.StopPatch, l.workload.Stopped
		rc.Why = fmt.Sprintf("%s: its RayCluster is suspended instead, which KubeRay honours in any state", why)
		return rc
	}
	topOwner.Stop, topOwner.Why = reclaim.StopNone, why+", and the pod is not under a RayCluster of it that could be suspended instead"
	return topOwner
}

// rayJobUnsuspendable says why KubeRay would not act on a RayJob's
// spec.suspend; empty when it would.
func rayJobUnsuspendable(u *unstructured.Unstructured) string {
	name := fmt.Sprintf("RayJob %s/%s", u.GetNamespace(), u.GetName())
	if v, _, _ := unstructured.NestedBool(u.Object, "spec", "shutdownAfterJobFinishes"); !v {
		return "KubeRay refuses to suspend " + name + ": its shutdownAfterJobFinishes is false"
	}
	if m, _, _ := unstructured.NestedMap(u.Object, "spec", "clusterSelector"); len(m) > 0 {
		return "KubeRay does not suspend " + name + ": it runs on a RayCluster it selects (clusterSelector)"
	}
	st, _, _ := unstructured.NestedString(u.Object, "status", "jobDeploymentStatus")
	if st != "Initializing" && st != "Running" {
		if st == "" {
			st = "new"
		}
		return fmt.Sprintf("KubeRay ignores a suspend of %s while it is %s (it acts only while Initializing or Running)", name, st)
	}
	return ""
}

// kueueManaged finds the highest object on the chain that Kueue admits.
func kueueManaged(ch *chain) (*unstructured.Unstructured, bool) {
	ms := ch.metas()
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].GetLabels()[config.KueueQueueLabel] == "" && ms[i].GetAnnotations()[config.KueueQueueLabel] == "" {
			continue
		}
		if u, ok := ms[i].(*unstructured.Unstructured); ok {
			return u, true
		}
		p := ch.pod // Kueue's pod integration: the pod itself is admitted
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace, "uid": string(p.UID)}}}, true
	}
	return nil, false
}

// hubServer says whether a pod is a JupyterHub single-user server, and whose.
func hubServer(p *corev1.Pod) (user, server string, ok bool) {
	if p.Labels[jupyterhub.ComponentLabel] != jupyterhub.ServerComponent {
		return "", "", false
	}
	// KubeSpawner escapes the labels; the annotations hold the names as the hub knows them.
	user = firstOf(p.Annotations[jupyterhub.UserKey], p.Labels[jupyterhub.UserKey])
	server = firstOf(p.Annotations[jupyterhub.ServerKey], p.Labels[jupyterhub.ServerKey])
	return user, server, user != ""
}

func firstOf(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// hasScale asks discovery whether a resource has a scale subresource.
func (c *Client) hasScale(gvr schema.GroupVersionResource) bool {
	rl, err := c.disco.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range rl.APIResources {
		if r.Name == gvr.Resource+"/scale" {
			return true
		}
	}
	return false
}

// startOf is when an owner started: its status.startTime where it keeps
// one (a Job), else when it was created.
func startOf(o metav1.Object) time.Time {
	if u, ok := o.(*unstructured.Unstructured); ok {
		if s, found, _ := unstructured.NestedString(u.Object, "status", "startTime"); found {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return t
			}
		}
	}
	return o.GetCreationTimestamp().Time
}

// describe names an object on the chain for people.
func describe(o metav1.Object) string {
	if u, ok := o.(*unstructured.Unstructured); ok {
		return fmt.Sprintf("%s %s/%s", u.GetKind(), u.GetNamespace(), u.GetName())
	}
	return "the pod"
}
