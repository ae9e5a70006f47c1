package nvmlsim

import (
	"fmt"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
)

// PodResources is what the node's kubelet reports through its pod-resources
// API: each running pod's containers with the GPU devices allocated to them,
// named as the NVIDIA device plugin names them (a GPU UUID; a MIG UUID under
// nvidia.com/mig-<profile>; <uuid>::<n> for a replica of a shared GPU).
func (s *Sim) PodResources() []*podresourcesapi.PodResources {
	s.mu.Lock()
	removed := map[string]bool{}
	for k, v := range s.removedPods {
		removed[k] = v
	}
	cluster := s.clusterClaims
	s.mu.Unlock()

	if s.sc.Allocation == AllocationDRA {
		return append(s.draPodResources(removed), clusterPodResources(cluster)...)
	}
	devices := map[string][]*podresourcesapi.ContainerDevices{}
	for _, d := range s.devices {
		shared := d.cfg.MPS || len(d.unit.cfg.Pods) > 1
		for k, name := range d.unit.cfg.Pods {
			id := d.uuid
			if shared {
				id = fmt.Sprintf("%s::%d", d.uuid, k)
			}
			devices[name] = append(devices[name], &podresourcesapi.ContainerDevices{ResourceName: "nvidia.com/gpu", DeviceIds: []string{id}})
		}
		for _, m := range d.migs {
			for _, name := range m.unit.cfg.Pods {
				devices[name] = append(devices[name], &podresourcesapi.ContainerDevices{ResourceName: "nvidia.com/mig-" + m.name, DeviceIds: []string{m.uuid}})
			}
		}
	}
	var out []*podresourcesapi.PodResources
	for _, p := range s.sc.Pods {
		if removed[p.Name] {
			continue
		}
		out = append(out, &podresourcesapi.PodResources{
			Name:      p.Name,
			Namespace: p.Namespace,
			Containers: []*podresourcesapi.ContainerResources{{
				Name:    p.Container,
				Devices: devices[p.Name],
			}},
		})
	}
	return out
}

// draPodResources is what the kubelet reports when NVIDIA's DRA driver
// allocated the units: each pod's claim and the devices in it, named as the
// driver names them (gpu-<minor>; gpu-<minor>-mig-<profile>-<GI profile
// id>-<placement start>), a GPU several pods share in each pod's claim.
func (s *Sim) draPodResources(removed map[string]bool) []*podresourcesapi.PodResources {
	byPod := map[string][]string{}
	for _, d := range s.devices {
		for _, pod := range d.unit.cfg.Pods {
			byPod[pod] = append(byPod[pod], names.DRAGPUName(d.Minor))
		}
		for _, m := range d.migs {
			for _, pod := range m.unit.cfg.Pods {
				byPod[pod] = append(byPod[pod], names.DRAMIGName(d.Minor, m.name, int(m.profile.Id), int(m.placement.Start)))
			}
		}
	}
	var out []*podresourcesapi.PodResources
	for _, p := range s.sc.Pods {
		if removed[p.Name] {
			continue
		}
		claim := p.Claim
		if claim == "" {
			claim = p.Name + "-gpu"
		}
		var devices []*podresourcesapi.ClaimResource
		for _, n := range byPod[p.Name] {
			devices = append(devices, &podresourcesapi.ClaimResource{DriverName: names.DRADrivers[0], PoolName: s.sc.Node, DeviceName: n})
		}
		var dynamic []*podresourcesapi.DynamicResource
		if len(devices) > 0 {
			dynamic = []*podresourcesapi.DynamicResource{{ClaimName: claim, ClaimNamespace: p.Namespace, ClaimResources: devices}}
		}
		out = append(out, &podresourcesapi.PodResources{
			Name:       p.Name,
			Namespace:  p.Namespace,
			Containers: []*podresourcesapi.ContainerResources{{Name: p.Container, DynamicResources: dynamic}},
		})
	}
	return out
}

// clusterPodResources reports the allocations a cluster made, one claim
// to each container that uses it.
func clusterPodResources(claims []ClusterClaim) []*podresourcesapi.PodResources {
	var out []*podresourcesapi.PodResources
	pods := map[string]*podresourcesapi.PodResources{}
	containers := map[string]*podresourcesapi.ContainerResources{}
	for _, c := range claims {
		pod := pods[c.Namespace+"/"+c.Pod]
		if pod == nil {
			pod = &podresourcesapi.PodResources{Name: c.Pod, Namespace: c.Namespace}
			pods[c.Namespace+"/"+c.Pod] = pod
			out = append(out, pod)
		}
		cr := containers[c.Namespace+"/"+c.Pod+"/"+c.Container]
		if cr == nil {
			cr = &podresourcesapi.ContainerResources{Name: c.Container}
			containers[c.Namespace+"/"+c.Pod+"/"+c.Container] = cr
			pod.Containers = append(pod.Containers, cr)
		}
		dr := &podresourcesapi.DynamicResource{ClaimName: c.ClaimName, ClaimNamespace: c.ClaimNamespace}
		for _, d := range c.Devices {
			dr.ClaimResources = append(dr.ClaimResources, &podresourcesapi.ClaimResource{DriverName: d.Driver, PoolName: d.Pool, DeviceName: d.Device})
		}
		cr.DynamicResources = append(cr.DynamicResources, dr)
	}
	return out
}

// PodMeta is what the API server knows of the scenario's pods.
func (s *Sim) PodMeta() []podmeta.Pod {
	var out []podmeta.Pod
	for _, p := range s.sc.Pods {
		out = append(out, podmeta.Pod{
			Namespace:  p.Namespace,
			Name:       p.Name,
			UID:        p.UID,
			Keep:       podmeta.Kept(p.Labels, p.Annotations),
			Containers: map[string]string{ContainerID(p.UID, p.Container): p.Container},
		})
	}
	return out
}
