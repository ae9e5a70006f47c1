package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// claims reads the ResourceClaims through which a pod holds GPUs: those
// allocated devices of the configured DRA drivers. A claim from the pod's
// template goes with the pod; a standalone one is shared, and its other
// consumers outside the workload that topOwner stops are named. A claim that
// cannot be read is left out, and said so in the log: the release is then
// judged by the pods alone.
func (c *Client) claims(ctx context.Context, p *corev1.Pod, topOwner reclaim.TopOwner) []reclaim.Claim {
	objs := stopped(&reclaim.Reclaim{TopOwner: &topOwner})
	var out []reclaim.Claim
	for _, pc := range p.Spec.ResourceClaims {
		name, shared := "", pc.ResourceClaimName != nil
		switch {
		case shared:
			name = *pc.ResourceClaimName
		default:
			for _, st := range p.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
		}
		if name == "" {
			continue // not made yet, or none needed
		}
		rc, err := c.cs.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				c.log.Warn("reading a pod's ResourceClaim; its release is judged by the pods alone", "pod", p.Namespace+"/"+p.Name, "claim", name, "err", err)
			}
			continue
		}
		if !c.holdsGPUs(rc) {
			continue
		}
		cl := reclaim.Claim{Namespace: p.Namespace, Name: name, Shared: shared}
		if shared {
			for _, r := range rc.Status.ReservedFor {
				if r.Resource == "pods" && r.UID != p.UID && !c.stoppedWith(ctx, p.Namespace, r.Name, objs) {
					cl.Others = append(cl.Others, "pod "+p.Namespace+"/"+r.Name)
				}
			}
			slices.Sort(cl.Others)
		}
		out = append(out, cl)
	}
	return out
}

// stoppedWith says whether a pod goes with the objects a stop stops (and
// so is no other holder); a pod that cannot be read is counted as other.
func (c *Client) stoppedWith(ctx context.Context, ns, name string, objs []ref) bool {
	if len(objs) == 0 {
		return false
	}
	ch, err := c.walk(ctx, ns, name)
	return err == nil && ch.under(objs)
}

// holdsGPUs says whether a claim is allocated devices of a GPU driver.
func (c *Client) holdsGPUs(rc *resourcev1.ResourceClaim) bool {
	if rc.Status.Allocation == nil {
		return false
	}
	for _, r := range rc.Status.Allocation.Devices.Results {
		if slices.Contains(c.draDrivers, r.Driver) {
			return true
		}
	}
	return false
}

// claimsReleased says whether the claims a reclaim's pod held let go of
// their devices: each is gone, deallocated, or reserved for no pod. A claim
// still reserved for a pod that is gone waits for the resource claim
// controller to drop it. One reserved only for pods outside the stopped
// workload keeps the GPU with them: the target's share is freed, and
// shared says who holds the GPU now.
func (c *Client) claimsReleased(ctx context.Context, r *reclaim.Reclaim, objs []ref) (holders []string, shared string, err error) {
	if r.TopOwner == nil {
		return nil, "", nil
	}
	var others []string
	for _, cl := range r.TopOwner.Claims {
		rc, err := c.cs.ResourceV1().ResourceClaims(cl.Namespace).Get(ctx, cl.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return nil, "", fmt.Errorf("reading %s: %w", cl, err)
		case rc.Status.Allocation == nil || len(rc.Status.ReservedFor) == 0:
			continue
		}
		var live []string
		for _, res := range rc.Status.ReservedFor {
			if res.Resource != "pods" {
				live = append(live, res.Resource+" "+res.Name)
				continue
			}
			p, err := c.cs.CoreV1().Pods(cl.Namespace).Get(ctx, res.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) || (err == nil && (p.UID != res.UID || finished(p))):
				holders = append(holders, fmt.Sprintf("%s (still reserved for pod %s, which is gone)", cl, res.Name))
				continue
			case err != nil:
				return nil, "", err
			}
			ours := p.Name == r.Target.Pod
			if !ours {
				ch, err := c.walkPod(ctx, p)
				if err != nil {
					return nil, "", err
				}
				ours = ch.under(objs)
			}
			if ours {
				holders = append(holders, fmt.Sprintf("%s (reserved for %s)", cl, podState(p)))
				continue
			}
			live = append(live, "pod "+cl.Namespace+"/"+p.Name)
		}
		if len(live) > 0 {
			others = append(others, fmt.Sprintf("%s is reserved for %s", cl, strings.Join(live, ", ")))
		}
	}
	return holders, strings.Join(others, "; "), nil
}
