package main

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/kubeapi"
	"github.com/gpureclaim/gpureclaim/internal/loop"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

// podWatch keeps a simulated node's pods in step with a cluster: a pod that
// was there and is gone, or terminating, is gone from the simulated node
// too; under allocation: dra, the devices the scheduler allocated to the
// node's running pods' ResourceClaims are theirs. It reads them with plain
// API calls (internal/kubeapi).
type podWatch struct {
	api  *kubeapi.Client
	sim  *nvmlsim.Sim
	node string
	log  *slog.Logger
	seen map[string]bool
}

func newPodWatch(kubeconfig string, sim *nvmlsim.Sim, node string, log *slog.Logger) (*podWatch, error) {
	api, err := kubeapi.New(kubeconfig)
	if err != nil {
		return nil, err
	}
	return &podWatch{api: api, sim: sim, node: node, log: log, seen: map[string]bool{}}, nil
}

func (w *podWatch) run(ctx context.Context, every time.Duration) {
	loop.Every(ctx, every, func() { w.sync(ctx) })
}

func (w *podWatch) sync(ctx context.Context) {
	pods, err := nodePods(ctx, w.api, w.node)
	if err != nil {
		w.log.Warn("listing the simulated node's pods", "err", err)
		return
	}
	running := map[string]string{} // UIDs by namespace/name
	for _, p := range pods {
		if p.Metadata.DeletionTimestamp == nil {
			running[p.Metadata.Namespace+"/"+p.Metadata.Name] = p.Metadata.UID
		}
	}
	if w.sim.Scenario().Allocation == nvmlsim.AllocationDRA {
		w.sim.SetClusterClaims(w.claims(ctx, pods))
	}
	for _, p := range w.sim.Scenario().Pods {
		uid, ok := running[p.Namespace+"/"+p.Name]
		switch {
		case ok:
			w.seen[p.Name] = true
			// The cluster's pod is the simulated one: its processes carry
			// the cluster's UID, as a node's cgroups do.
			w.sim.AdoptPodUID(p.Name, uid)
		case w.seen[p.Name]:
			if w.sim.RemovePod(p.Name) {
				w.log.Info("pod left the cluster: its GPUs are free", "pod", p.Namespace+"/"+p.Name)
			}
		}
	}
}

// apiPod holds the fields of a pod the pod watch reads.
type apiPod struct {
	Metadata struct {
		Name              string  `json:"name"`
		Namespace         string  `json:"namespace"`
		UID               string  `json:"uid"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name      string `json:"name"`
			Resources struct {
				Claims []struct {
					Name string `json:"name"`
				} `json:"claims"`
			} `json:"resources"`
		} `json:"containers"`
		ResourceClaims []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaims"`
	} `json:"spec"`
	Status struct {
		Phase                 string `json:"phase"`
		ResourceClaimStatuses []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaimStatuses"`
	} `json:"status"`
}

// claims are the DRA allocations of the node's running pods, as the
// scheduler wrote them into their ResourceClaims: what the kubelet would
// report once the DRA driver prepared them.
func (w *podWatch) claims(ctx context.Context, pods []apiPod) []nvmlsim.ClusterClaim {
	var out []nvmlsim.ClusterClaim
	for _, p := range pods {
		if p.Status.Phase != "Running" || p.Metadata.DeletionTimestamp != nil {
			continue
		}
		for _, rc := range p.Spec.ResourceClaims {
			name := rc.ResourceClaimName
			for _, st := range p.Status.ResourceClaimStatuses {
				if name == "" && st.Name == rc.Name {
					name = st.ResourceClaimName
				}
			}
			if name == "" {
				continue
			}
			devices, err := allocation(ctx, w.api, p.Metadata.Namespace, name)
			if err != nil {
				w.log.Warn("reading a pod's ResourceClaim", "pod", p.Metadata.Namespace+"/"+p.Metadata.Name, "claim", name, "err", err)
				continue
			}
			for _, c := range p.Spec.Containers {
				for _, used := range c.Resources.Claims {
					if used.Name == rc.Name && len(devices) > 0 {
						out = append(out, nvmlsim.ClusterClaim{Namespace: p.Metadata.Namespace, Pod: p.Metadata.Name, Container: c.Name,
							ClaimNamespace: p.Metadata.Namespace, ClaimName: name, Devices: devices})
					}
				}
			}
		}
	}
	return out
}

// nodePods lists the node's pods.
func nodePods(ctx context.Context, c *kubeapi.Client, node string) ([]apiPod, error) {
	var list struct {
		Items []apiPod `json:"items"`
	}
	if err := c.Get(ctx, "/api/v1/pods?fieldSelector="+url.QueryEscape("spec.nodeName="+node), &list); err != nil {
		return nil, err
	}
	if list.Items == nil {
		return nil, errors.New("listing pods: no item list in the answer")
	}
	return list.Items, nil
}

// allocation reads the devices allocated to a ResourceClaim.
func allocation(ctx context.Context, c *kubeapi.Client, ns, name string) ([]nvmlsim.ClaimDevice, error) {
	var claim struct {
		Status struct {
			Allocation *struct {
				Devices struct {
					Results []struct {
						Driver string `json:"driver"`
						Pool   string `json:"pool"`
						Device string `json:"device"`
					} `json:"results"`
				} `json:"devices"`
			} `json:"allocation"`
		} `json:"status"`
	}
	if err := c.Get(ctx, "/apis/resource.k8s.io/v1/namespaces/"+url.PathEscape(ns)+"/resourceclaims/"+url.PathEscape(name), &claim); err != nil {
		return nil, err
	}
	if claim.Status.Allocation == nil {
		return nil, nil
	}
	var out []nvmlsim.ClaimDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, nvmlsim.ClaimDevice{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
	}
	return out, nil
}
