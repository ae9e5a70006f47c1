package podresources

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The parts of the kubelet's ListPodResourcesResponse the exporter reads
// (k8s.io/kubelet/pkg/apis/podresources/v1, api.proto), and their field
// numbers. Other fields are skipped.
type (
	pod struct {
		name, namespace string // 1, 2
		containers      []container
	}
	container struct {
		name    string         // 1
		devices []devices      // 2
		claims  []claimDevices // 5: dynamic_resources
	}
	devices struct {
		resource string   // 1: resource_name
		ids      []string // 2: device_ids
	}
	claimDevices struct {
		name, namespace string   // 2: claim_name, 3: claim_namespace
		devices         []Device // 4: claim_resources (2: driver_name, 3: pool_name, 4: device_name)
	}
)

// decodeList reads a ListPodResourcesResponse: its pod_resources (1).
func decodeList(b []byte) ([]pod, error) {
	var pods []pod
	err := fields(b, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		var p pod
		err := fields(v, func(num protowire.Number, v []byte) error {
			switch num {
			case 1:
				p.name = string(v)
			case 2:
				p.namespace = string(v)
			case 3:
				c, err := decodeContainer(v)
				p.containers = append(p.containers, c)
				return err
			}
			return nil
		})
		pods = append(pods, p)
		return err
	})
	return pods, err
}

func decodeContainer(b []byte) (container, error) {
	var c container
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			c.name = string(v)
		case 2:
			var d devices
			err := fields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					d.resource = string(v)
				case 2:
					d.ids = append(d.ids, string(v))
				}
				return nil
			})
			c.devices = append(c.devices, d)
			return err
		case 5:
			var cd claimDevices
			err := fields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 2:
					cd.name = string(v)
				case 3:
					cd.namespace = string(v)
				case 4:
					var d Device
					err := fields(v, func(num protowire.Number, v []byte) error {
						switch num {
						case 2:
							d.Driver = string(v)
						case 3:
							d.Pool = string(v)
						case 4:
							d.Name = string(v)
						}
						return nil
					})
					cd.devices = append(cd.devices, d)
					return err
				}
				return nil
			})
			c.claims = append(c.claims, cd)
			return err
		}
		return nil
	})
	return c, err
}

// fields calls f with each length-delimited field of a message (strings,
// messages, packed repeated fields) and skips the others.
func fields(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed message: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("malformed field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("malformed field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
