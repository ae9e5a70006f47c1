package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Annotations the reclaimer leaves on what it stopped, so that a restore
// (or a person) knows what to undo.
const (
	// ReplicasAnnotation remembers a workload's replicas before a scale-down.
	ReplicasAnnotation = "gpureclaim.io/replicas-before-scale-down"
	// StoppedAnnotation names the reclaim that stopped a workload (or
	// deactivated its Kueue Workload).
	StoppedAnnotation = "gpureclaim.io/stopped-by"
)

// Kueue's Workload, which admits a job.
var kueueWorkload = schema.GroupKind{Group: "kueue.x-k8s.io", Kind: "Workload"}

// Stop stops the pod's top owner the way its controller expects, as the
// reclaim recorded it before the warning: a merge patch (suspend, a stop
// annotation), a Kueue Workload deactivated, or a JupyterHub server
// stopped. Run again, it finds the same state and does nothing more.
func (c *Client) Stop(ctx context.Context, r *reclaim.Reclaim) (reclaim.Result, error) {
	topOwner := r.TopOwner
	if topOwner == nil {
		return reclaim.Result{}, fmt.Errorf("no top owner was recorded for %s", r.Target.Holder())
	}
	if isRay(topOwner) || (topOwner.Above != nil && isRay(topOwner.Above)) {
		// Whether KubeRay honours a RayJob's suspend depends on its state
		// now, not at the warning: decide again.
		fresh, err := c.TopOwner(ctx, r.Target)
		switch {
		case errors.Is(err, reclaim.ErrGone):
			return reclaim.Result{}, err
		case err != nil:
			return reclaim.Result{}, fmt.Errorf("reading the owners of %s again: %w", r.Target.Holder(), err)
		}
		topOwner = &fresh
	}
	switch topOwner.Stop {
	case reclaim.StopPatch:
		return c.stopPatch(ctx, r, topOwner)
	case reclaim.StopKueue:
		return c.stopKueue(ctx, r, topOwner)
	case reclaim.StopHub:
		return c.stopHub(ctx, r, topOwner)
	case reclaim.StopScale:
		return c.ScaleDown(ctx, r, 0)
	}
	return reclaim.Result{}, fmt.Errorf("%s cannot be stopped: %s", topOwner, topOwner.Why)
}

func isRay(topOwner *reclaim.TopOwner) bool {
	return topOwner.Kind == rayJob && strings.HasPrefix(topOwner.APIVersion, rayGroup+"/")
}

func (c *Client) stopPatch(ctx context.Context, r *reclaim.Reclaim, topOwner *reclaim.TopOwner) (reclaim.Result, error) {
	gv, err := schema.ParseGroupVersion(topOwner.APIVersion)
	if err != nil {
		return reclaim.Result{}, err
	}
	w := c.workloadFor(gv.Group, topOwner.Kind)
	if w == nil || w.Disabled {
		return reclaim.Result{}, &reclaim.RefusedError{Reason: fmt.Sprintf("stopping %s is no longer in the config", topOwner.Kind)}
	}
	patch, err := withAnnotation(w.StopPatch, StoppedAnnotation, r.ID, c.clock().UTC().Format("2006-01-02T15:04:05Z"))
	if err != nil {
		return reclaim.Result{}, err
	}
	res := c.dyn.Resource(gv.WithResource(w.Resource)).Namespace(topOwner.Namespace)
	if _, err := res.Patch(ctx, topOwner.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		if apierrors.IsNotFound(err) {
			return reclaim.Result{}, reclaim.ErrGone
		}
		return reclaim.Result{}, fmt.Errorf("stopping %s: %w", topOwner, err)
	}
	wl := &reclaim.Stopped{APIVersion: topOwner.APIVersion, Kind: topOwner.Kind, Namespace: topOwner.Namespace, Name: topOwner.Name, Stop: reclaim.StopPatch, StopVerb: w.Stopped, RestoreVerb: w.Restored}
	detail := fmt.Sprintf("%s %s", wl, w.Stopped)
	if topOwner.Above != nil && topOwner.Why != "" {
		detail += " (" + topOwner.Why + ")"
	}
	return reclaim.Result{Stopped: wl, Detail: detail}, nil
}

// kueueWorkloadOf finds the Kueue Workload that admits an object: the one
// it controls.
func (c *Client) kueueWorkloadOf(ctx context.Context, ns, kind, name string) (*unstructured.Unstructured, schema.GroupVersionResource, error) {
	m, err := c.mapper.RESTMapping(kueueWorkload)
	if err != nil {
		return nil, schema.GroupVersionResource{}, fmt.Errorf("no Kueue Workload kind is served here: %w", err)
	}
	list, err := c.dyn.Resource(m.Resource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, m.Resource, fmt.Errorf("listing Kueue Workloads in %s: %w", ns, err)
	}
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.Kind == kind && ref.Name == name {
			return &list.Items[i], m.Resource, nil
		}
	}
	return nil, m.Resource, nil
}

func (c *Client) stopKueue(ctx context.Context, r *reclaim.Reclaim, topOwner *reclaim.TopOwner) (reclaim.Result, error) {
	wl, gvr, err := c.kueueWorkloadOf(ctx, topOwner.Namespace, topOwner.Kind, topOwner.Name)
	if err != nil {
		return reclaim.Result{}, err
	}
	if wl == nil {
		return reclaim.Result{}, &reclaim.RetryError{After: defaultRetry, Err: fmt.Errorf("no Kueue Workload of %s was found yet, though Kueue admits it", topOwner)}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"active":false}}`, StoppedAnnotation, r.ID)
	if _, err := c.dyn.Resource(gvr).Namespace(topOwner.Namespace).Patch(ctx, wl.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		if apierrors.IsNotFound(err) {
			return reclaim.Result{}, reclaim.ErrGone
		}
		return reclaim.Result{}, fmt.Errorf("deactivating the Kueue Workload of %s: %w", topOwner, err)
	}
	w := &reclaim.Stopped{APIVersion: topOwner.APIVersion, Kind: topOwner.Kind, Namespace: topOwner.Namespace, Name: topOwner.Name, Stop: reclaim.StopKueue,
		Via: "Workload " + topOwner.Namespace + "/" + wl.GetName(), StopVerb: topOwner.Stopped, RestoreVerb: "requeued through its Kueue Workload"}
	return reclaim.Result{Stopped: w, Detail: fmt.Sprintf("%s stopped: Kueue Workload %s deactivated", w, wl.GetName())}, nil
}

func (c *Client) stopHub(ctx context.Context, r *reclaim.Reclaim, topOwner *reclaim.TopOwner) (reclaim.Result, error) {
	if c.hub == nil {
		return reclaim.Result{}, &reclaim.RefusedError{Reason: "no JupyterHub is configured any more"}
	}
	user, server, _ := strings.Cut(topOwner.Name, "/")
	if err := c.hub.Stop(ctx, user, server); err != nil {
		return reclaim.Result{}, err
	}
	w := &reclaim.Stopped{Kind: topOwner.Kind, Namespace: r.Target.Namespace, Name: topOwner.Name, Stop: reclaim.StopHub, StopVerb: topOwner.Stopped, RestoreVerb: "started again through the hub"}
	return reclaim.Result{Stopped: w, Detail: fmt.Sprintf("the JupyterHub server of %s stopped", topOwner.Name)}, nil
}

// Restore undoes what a reclaim stopped: the replicas back, the restore
// patch, the Kueue Workload active again, the hub server started.
func (c *Client) Restore(ctx context.Context, r *reclaim.Reclaim) error {
	w := r.Stopped
	switch w.Stop {
	case reclaim.StopScale, "":
		return c.restoreScale(ctx, w)
	case reclaim.StopHub:
		if c.hub == nil {
			return reclaim.ErrNotRestorable
		}
		user, server, _ := strings.Cut(w.Name, "/")
		return c.hub.Start(ctx, user, server)
	case reclaim.StopKueue:
		wl, gvr, err := c.kueueWorkloadOf(ctx, w.Namespace, w.Kind, w.Name)
		if err != nil {
			return err
		}
		if wl == nil {
			return fmt.Errorf("the Kueue Workload of %s is gone", w)
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"active":true}}`, StoppedAnnotation)
		_, err = c.dyn.Resource(gvr).Namespace(w.Namespace).Patch(ctx, wl.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager})
		return err
	case reclaim.StopPatch:
		gv, err := schema.ParseGroupVersion(w.APIVersion)
		if err != nil {
			return err
		}
		wd := c.workloadFor(gv.Group, w.Kind)
		if wd == nil {
			return fmt.Errorf("%s is no longer declared under workloads: nothing says how to restore it", w.Kind)
		}
		patch, err := withAnnotation(wd.RestorePatch, StoppedAnnotation, "", "")
		if err != nil {
			return err
		}
		_, err = c.dyn.Resource(gv.WithResource(wd.Resource)).Namespace(w.Namespace).Patch(ctx, w.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
		if err != nil {
			return fmt.Errorf("restoring %s: %w", w, err)
		}
		return nil
	}
	return reclaim.ErrNotRestorable
}

// withAnnotation merges the reclaimer's annotation into a merge patch (an
// empty value removes it) and puts the time in for "$now".
func withAnnotation(patch []byte, key, value, now string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	if now != "" {
		replaceNow(m, now)
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	if value == "" {
		ann[key] = nil
	} else {
		ann[key] = value
	}
	return json.Marshal(m)
}

func replaceNow(m map[string]any, now string) {
	for k, v := range m {
		switch v := v.(type) {
		case string:
			if v == "$now" {
				m[k] = now
			}
		case map[string]any:
			replaceNow(v, now)
		}
	}
}

// replicas reads a workload's replicas through its scale subresource.
func (c *Client) replicas(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (int32, error) {
	sc, err := c.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{}, "scale")
	if err != nil {
		return 0, err
	}
	n, _, err := unstructured.NestedInt64(sc.Object, "spec", "replicas")
	return int32(n), err
}

func (c *Client) setReplicas(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, n int32) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := c.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager}, "scale")
	return err
}

func (c *Client) annotate(ctx context.Context, gvr schema.GroupVersionResource, ns, name, key string, value *string) error {
	val := "null"
	if value != nil {
		val = strconv.Quote(*value)
	}
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, val)
	_, err := c.dyn.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// scaleTarget is the workload a scale-down scales: the recorded top owner,
// or found now for a reclaim decided without one.
func (c *Client) scaleTarget(ctx context.Context, r *reclaim.Reclaim) (schema.GroupVersionResource, *reclaim.TopOwner, error) {
	topOwner := r.TopOwner
	if topOwner == nil || topOwner.Stop != reclaim.StopScale {
		found, err := c.TopOwner(ctx, r.Target)
		if err != nil {
			return schema.GroupVersionResource{}, nil, err
		}
		if found.Stop != reclaim.StopScale {
			if found.Kind == "" {
				return schema.GroupVersionResource{}, nil, fmt.Errorf("pod %s/%s has no controller to scale down", r.Target.Namespace, r.Target.Pod)
			}
			return schema.GroupVersionResource{}, nil, fmt.Errorf("pod %s/%s belongs to %s, which gpureclaim does not scale", r.Target.Namespace, r.Target.Pod, found)
		}
		topOwner = &found
	}
	gv, err := schema.ParseGroupVersion(topOwner.APIVersion)
	if err != nil {
		return schema.GroupVersionResource{}, nil, err
	}
	gvr, _, err := c.resourceFor(gv, topOwner.Kind)
	return gvr, topOwner, err
}

// ScaleDown scales the pod's top owner to `to` replicas through its scale
// subresource, first writing its current replicas into an annotation. Run
// again, it finds the annotation and the replicas already down, and does
// nothing.
func (c *Client) ScaleDown(ctx context.Context, r *reclaim.Reclaim, to int32) (reclaim.Result, error) {
	gvr, topOwner, err := c.scaleTarget(ctx, r)
	if err != nil {
		return reclaim.Result{}, err
	}
	what := topOwner.String()
	obj, err := c.dyn.Resource(gvr).Namespace(topOwner.Namespace).Get(ctx, topOwner.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return reclaim.Result{}, reclaim.ErrGone
	}
	if err != nil {
		return reclaim.Result{}, fmt.Errorf("reading %s: %w", what, err)
	}
	replicas, err := c.replicas(ctx, gvr, topOwner.Namespace, topOwner.Name)
	if err != nil {
		return reclaim.Result{}, fmt.Errorf("reading the scale of %s: %w", what, err)
	}
	prev := replicas
	if v, ok := obj.GetAnnotations()[ReplicasAnnotation]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			prev = int32(n) // scaled down before (a retry): keep the first count
		}
	} else {
		v := strconv.Itoa(int(replicas))
		if err := c.annotate(ctx, gvr, topOwner.Namespace, topOwner.Name, ReplicasAnnotation, &v); err != nil {
			return reclaim.Result{}, fmt.Errorf("annotating %s: %w", what, err)
		}
	}
	if replicas != to {
		if err := c.setReplicas(ctx, gvr, topOwner.Namespace, topOwner.Name, to); err != nil {
			return reclaim.Result{}, fmt.Errorf("scaling %s: %w", what, err)
		}
	}
	w := &reclaim.Stopped{APIVersion: topOwner.APIVersion, Kind: topOwner.Kind, Namespace: topOwner.Namespace, Name: topOwner.Name, Stop: reclaim.StopScale, PreviousReplicas: prev, ScaledTo: to,
		StopVerb: "scaled down", RestoreVerb: "scaled back"}
	return reclaim.Result{Stopped: w, Detail: fmt.Sprintf("%s scaled from %d to %d replicas", what, prev, to)}, nil
}

// restoreScale scales a workload back to the replicas its annotation
// remembers and removes the annotation.
func (c *Client) restoreScale(ctx context.Context, w *reclaim.Stopped) error {
	apiVersion := w.APIVersion
	if apiVersion == "" {
		apiVersion = "apps/v1" // recorded before the reclaimer kept it
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return err
	}
	gvr, _, err := c.resourceFor(gv, w.Kind)
	if err != nil {
		return err
	}
	obj, err := c.dyn.Resource(gvr).Namespace(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s: %w", w, err)
	}
	replicas := w.PreviousReplicas
	if v, ok := obj.GetAnnotations()[ReplicasAnnotation]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			replicas = int32(n)
		}
	}
	if err := c.setReplicas(ctx, gvr, w.Namespace, w.Name, replicas); err != nil {
		return fmt.Errorf("scaling %s back: %w", w, err)
	}
	return c.annotate(ctx, gvr, w.Namespace, w.Name, ReplicasAnnotation, nil)
}
