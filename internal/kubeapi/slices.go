package kubeapi

import (
	"context"
	"net/url"
	"slices"

	"github.com/gpureclaim/gpureclaim/internal/podresources"
)

// resourceSlices holds the fields of a ResourceSlice list the client reads
// (resource.k8s.io/v1).
type resourceSlices struct {
	Items []struct {
		Spec struct {
			Driver string `json:"driver"`
			Pool   struct {
				Name string `json:"name"`
			} `json:"pool"`
			Devices []struct {
				Name       string `json:"name"`
				Attributes map[string]struct {
					String *string `json:"string"`
				} `json:"attributes"`
			} `json:"devices"`
		} `json:"spec"`
	} `json:"items"`
}

// UUIDAttribute is the attribute NVIDIA's DRA driver publishes a GPU's or a
// MIG device's UUID in.
const UUIDAttribute = "uuid"

// DeviceUUIDs reads the node's ResourceSlices of the given drivers: the
// UUID each device publishes, by driver, pool and device name. It needs
// list on resourceslices.
func (c *Client) DeviceUUIDs(ctx context.Context, node string, drivers []string) (map[podresources.Device]string, error) {
	var list resourceSlices
	if err := c.Get(ctx, "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="+url.QueryEscape("spec.nodeName="+node), &list); err != nil {
		return nil, err
	}
	out := map[podresources.Device]string{}
	for _, s := range list.Items {
		if !slices.Contains(drivers, s.Spec.Driver) {
			continue
		}
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes[UUIDAttribute]; ok && a.String != nil {
				out[podresources.Device{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Name: d.Name}] = *a.String
			}
		}
	}
	return out, nil
}
