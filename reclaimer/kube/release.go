package kube

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The most a controller's own words take in a message.
const (
	maxSaid       = 600
	warningEvents = 3
)

// ref names an object the reclaimer stopped or decided on.
type ref struct{ apiVersion, kind, namespace, name string }

func (o ref) String() string { return fmt.Sprintf("%s %s/%s", o.kind, o.namespace, o.name) }

// stopped lists what a reclaim stopped and decided on: the workload it
// patched or scaled, and the top owner above it (a RayJob whose
// RayCluster was suspended). A pod under any of them is the workload's.
func stopped(r *reclaim.Reclaim) []ref {
	var out []ref
	if w := r.Stopped; w != nil && w.Name != "" {
		out = append(out, ref{w.APIVersion, w.Kind, w.Namespace, w.Name})
	}
	if c := r.TopOwner; c != nil && c.Name != "" && c.Stop != reclaim.StopHub {
		o := ref{c.APIVersion, c.Kind, c.Namespace, c.Name}
		if len(out) == 0 || out[0] != o {
			out = append(out, o)
		}
		if c.Above != nil {
			out = append(out, ref{c.Above.APIVersion, c.Above.Kind, c.Above.Namespace, c.Above.Name})
		}
	}
	return out
}

// finished says whether a pod has ended: it holds no device any more.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// holdsGPU says whether a pod asks for a GPU or a MIG slice, through the
// device plugin's resources or through resource claims, and is not done.
func holdsGPU(p *corev1.Pod) bool {
	if finished(p) {
		return false
	}
	if len(p.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			for name := range c.Resources.Limits {
				if names.IsGPUResource(string(name)) {
					return true
				}
			}
		}
	}
	return false
}

// under says whether a pod's chain of owners reaches one of the objects.
func (ch *chain) under(objs []ref) bool {
	for _, l := range ch.links {
		for _, o := range objs {
			if l.kind == o.kind && l.obj.GetName() == o.name {
				return true
			}
		}
	}
	for _, o := range objs {
		if o.kind == "Pod" && o.name == ch.pod.Name {
			return true
		}
	}
	return false
}

func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("pod %s/%s (%s", p.Namespace, p.Name, p.Status.Phase)
	if p.DeletionTimestamp != nil {
		s += ", terminating"
	}
	return s + ")"
}

// podKey names a pod for good: its namespace, name and UID.
func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name + "/" + string(p.UID) }

// holding are the pods that hold the reclaim's GPU now: its own pod,
// unless it has ended, and the GPU pods on its node under what it stopped
// or will stop. On an error it gives those found so far.
func (c *Client) holding(ctx context.Context, r *reclaim.Reclaim) ([]*corev1.Pod, error) {
	t := r.Target
	var out []*corev1.Pod
	p, err := c.cs.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	case !finished(p):
		out = append(out, p)
	}
	objs := stopped(r)
	if len(objs) == 0 {
		return out, nil
	}
	pods, err := c.cs.CoreV1().Pods(t.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + t.Node})
	if err != nil {
		return out, fmt.Errorf("listing the pods on %s: %w", t.Node, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Name == t.Pod || !holdsGPU(p) {
			continue
		}
		ch, err := c.walkPod(ctx, p)
		if err != nil {
			return out, err
		}
		if ch.under(objs) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Holders are the pods that hold the GPU before the action (holding), by
// namespace/name/uid. The release waits for each of them, even once their
// owners are gone (KubeRay deletes a RayJob's RayCluster while its head pod
// still terminates).
func (c *Client) Holders(ctx context.Context, r *reclaim.Reclaim) ([]string, error) {
	pods, err := c.holding(ctx, r)
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, podKey(p))
	}
	sort.Strings(out)
	return out, err
}

// stillHeld are the pods that held the GPU at the action and are still
// there, the same pods (by UID) and not finished, whatever their owners.
func (c *Client) stillHeld(ctx context.Context, r *reclaim.Reclaim, seen map[string]bool) ([]string, error) {
	var out []string
	for _, k := range r.HeldBy {
		parts := strings.SplitN(k, "/", 3)
		if len(parts) != 3 || seen[parts[0]+"/"+parts[1]] {
			continue
		}
		p, err := c.cs.CoreV1().Pods(parts[0]).Get(ctx, parts[1], metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		case string(p.UID) == parts[2] && !finished(p):
			out = append(out, podState(p))
		}
	}
	return out, nil
}

// Released says whether the reclaim's pod is gone, no pod of the
// workload it stopped holds a GPU on the node, the pods that held the GPU
// at the action are gone, and the pod's ResourceClaims let go of their
// devices. While some hold on, it says which, and what the workload's
// controller reports.
func (c *Client) Released(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	t := r.Target
	pods, err := c.holding(ctx, r)
	if err != nil {
		return reclaim.Release{}, err
	}
	var holders []string
	seen := map[string]bool{t.Namespace + "/" + t.Pod: true} // looked at here
	for _, p := range pods {
		holders = append(holders, podState(p))
		seen[p.Namespace+"/"+p.Name] = true
	}
	left, err := c.stillHeld(ctx, r, seen)
	if err != nil {
		return reclaim.Release{}, err
	}
	holders = append(holders, left...)
	var shared string
	if len(holders) == 0 {
		held, others, err := c.claimsReleased(ctx, r, stopped(r))
		if err != nil {
			return reclaim.Release{}, err
		}
		holders, shared = held, others
	}
	if len(holders) == 0 {
		return reclaim.Release{Done: true, Shared: shared}, nil
	}
	sort.Strings(holders)
	why := "held by " + strings.Join(holders, ", ")
	if said := c.said(ctx, r); said != "" {
		why += "; " + said
	}
	return reclaim.Release{Why: why}, nil
}

// Running says whether a restored workload runs again: a pod of it that
// holds a GPU runs, on any node. A pod without one (a RayJob's submitter)
// does not count: the GPU work has not started.
func (c *Client) Running(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	w := r.Stopped
	pods, err := c.cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return reclaim.Release{}, fmt.Errorf("listing the pods of %s: %w", w, err)
	}
	objs := stopped(r)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || !holdsGPU(p) {
			continue
		}
		if w.Stop == reclaim.StopHub {
			if user, server, ok := hubServer(p); ok && strings.TrimSuffix(user+"/"+server, "/") == w.Name {
				return reclaim.Release{Done: true}, nil
			}
			continue
		}
		if metav1.GetControllerOf(p) == nil {
			continue
		}
		ch, err := c.walkPod(ctx, p)
		if err != nil {
			return reclaim.Release{}, err
		}
		if ch.under(objs) {
			return reclaim.Release{Done: true}, nil
		}
	}
	why := "no pod of " + w.String() + " that holds a GPU runs"
	if said := c.said(ctx, r); said != "" {
		why += "; " + said
	}
	return reclaim.Release{Why: why}, nil
}

// controllerNames name the controllers of the built-in kinds, by API group.
var controllerNames = map[string]string{
	"": "Kubernetes", "apps": "Kubernetes", "batch": "Kubernetes",
	"ray.io": "KubeRay", "kubeflow.org": "Kubeflow", "trainer.kubeflow.org": "Kubeflow Trainer",
	"kueue.x-k8s.io": "Kueue", "jobset.x-k8s.io": "JobSet", "leaderworkerset.x-k8s.io": "LeaderWorkerSet",
	"serving.kserve.io": "KServe",
}

// said is what the stopped workload's controller reports: the object's
// state, its true conditions and its latest Warning events. Empty when
// it reports nothing (or cannot be read: the holders say enough then).
func (c *Client) said(ctx context.Context, r *reclaim.Reclaim) string {
	var parts []string
	for _, o := range stopped(r) {
		if o.apiVersion == "" {
			continue
		}
		gv, err := schema.ParseGroupVersion(o.apiVersion)
		if err != nil {
			continue
		}
		var facts []string
		if gvr, _, err := c.resourceFor(gv, o.kind); err == nil {
			if u, err := c.dyn.Resource(gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{}); err == nil {
				facts = statusFacts(u)
			}
		}
		facts = append(facts, c.warnings(ctx, o)...)
		if len(facts) == 0 {
			continue
		}
		who := controllerNames[gv.Group]
		if who == "" {
			who = "its controller"
		}
		parts = append(parts, fmt.Sprintf("%s reports on %s: %s", who, o, strings.Join(facts, "; ")))
	}
	s := strings.Join(parts, "; ")
	if len(s) > maxSaid {
		s = s[:maxSaid] + "…"
	}
	return s
}

// statusFacts reads the state a controller writes into an object's status.
func statusFacts(u *unstructured.Unstructured) []string {
	var out []string
	for _, k := range []string{"phase", "state", "jobDeploymentStatus", "jobStatus", "reason", "message"} {
		if v, ok, _ := unstructured.NestedString(u.Object, "status", k); ok && v != "" {
			out = append(out, k+" "+v)
		}
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["status"] != "True" {
			continue
		}
		s := fmt.Sprint(m["type"])
		if v, _ := m["reason"].(string); v != "" {
			s += " (" + v + ")"
		}
		if v, _ := m["message"].(string); v != "" {
			s += ": " + v
		}
		out = append(out, s)
	}
	return out
}

// warnings are the latest Warning events about an object, newest first.
func (c *Client) warnings(ctx context.Context, o ref) []string {
	evs, err := c.cs.CoreV1().Events(o.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fmt.Sprintf("involvedObject.kind=%s,involvedObject.name=%s,type=%s", o.kind, o.name, corev1.EventTypeWarning)})
	if err != nil {
		return nil
	}
	items := evs.Items
	when := func(e *corev1.Event) time.Time {
		if !e.LastTimestamp.IsZero() {
			return e.LastTimestamp.Time
		}
		return e.EventTime.Time
	}
	sort.Slice(items, func(i, j int) bool { return when(&items[j]).Before(when(&items[i])) })
	var out []string
	for i := range items {
		if len(out) == warningEvents {
			break
		}
		if items[i].Source.Component == "gpureclaim-reclaimer" || items[i].ReportingController == fieldManager {
			continue // our own words are not the controller's
		}
		out = append(out, fmt.Sprintf("event %s: %s", items[i].Reason, items[i].Message))
	}
	return out
}
