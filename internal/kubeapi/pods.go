package kubeapi

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/gpureclaim/gpureclaim/internal/podmeta"
)

// podList holds the fields of a pod list the client reads.
type podList struct {
	Items *[]struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			UID         string            `json:"uid"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Status struct {
			ContainerStatuses     []containerStatus `json:"containerStatuses"`
			InitContainerStatuses []containerStatus `json:"initContainerStatuses"`
		} `json:"status"`
	} `json:"items"`
}

type containerStatus struct {
	Name        string `json:"name"`
	ContainerID string `json:"containerID"`
}

// NodePods lists the pods the apiserver places on node: the UIDs the
// exporter finds in its processes' cgroups, with their names, their
// containers' runtime ids and whether a label or annotation keeps them.
// It needs list on pods; resourceVersion=0 lets the apiserver answer from
// its cache rather than etcd.
func (c *Client) NodePods(ctx context.Context, node string) ([]podmeta.Pod, error) {
	var list podList
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}, "resourceVersion": {"0"}}
	if err := c.Get(ctx, "/api/v1/pods?"+q.Encode(), &list); err != nil {
		return nil, err
	}
	if list.Items == nil {
		return nil, errors.New("listing the node's pods: no item list in the answer")
	}
	out := make([]podmeta.Pod, 0, len(*list.Items))
	for _, p := range *list.Items {
		m := p.Metadata
		if m.UID == "" {
			continue
		}
		pod := podmeta.Pod{Namespace: m.Namespace, Name: m.Name, UID: m.UID, Keep: podmeta.Kept(m.Labels, m.Annotations),
			Containers: map[string]string{}}
		for _, cs := range append(p.Status.ContainerStatuses, p.Status.InitContainerStatuses...) {
			// "containerd://<id>", "cri-o://<id>": the cgroup names the id alone.
			if _, id, ok := strings.Cut(cs.ContainerID, "://"); ok && id != "" {
				pod.Containers[id] = cs.Name
			}
		}
		out = append(out, pod)
	}
	return out, nil
}
