// Package podresources reads which pods hold which GPU devices from the
// kubelet's pod-resources API (a gRPC service on a unix socket).
package podresources

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// DefaultSocket is where the kubelet serves the API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Container is a pod's container that holds a device. Claim names the
// ResourceClaim it holds a DRA device through; it is zero for a device
// plugin's.
type Container struct {
	Namespace, Pod, Container string
	Claim                     Claim
}

// Claim is a ResourceClaim.
type Claim struct {
	Namespace, Name string
}

// Device is a device a DRA driver allocated, as the kubelet names it: the
// driver, its pool (the node) and the device's name in the pool, which the
// exporter resolves to a unit with NVML (sampler.DRAName).
type Device struct {
	Driver, Pool, Name string
}

// Allocations are the kubelet's answer. Units maps a unit's UUID (GPU-… or
// MIG-…) to the containers a device plugin allocated it to; a replica of a
// shared GPU (<uuid>::<n>) counts for its GPU. Devices maps the devices of
// the DRA drivers asked for to the containers whose claims hold them.
type Allocations struct {
	Units   map[string][]Container
	Devices map[Device][]Container
}

// Client calls the kubelet's pod-resources API: gRPC's List, a unary call,
// as an HTTP/2 request over the unix socket, its answer decoded field by
// field (wire.go). A gRPC and protobuf runtime would be most of what a node
// runs for one call.
type Client struct {
	http    *http.Client
	timeout time.Duration
	// Drivers are the DRA drivers whose devices are read; default
	// names.DRADrivers.
	Drivers []string
}

// maxMessage bounds the kubelet's answer, as a gRPC client's receive limit.
const maxMessage = 16 << 20

// Dial makes a client of the kubelet's socket. Nothing is dialed before the
// first call, so a kubelet that starts later is picked up.
func Dial(socket string, timeout time.Duration) (*Client, error) {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true) // gRPC speaks HTTP/2 with prior knowledge
	tr := &http.Transport{Protocols: &p, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{http: &http.Client{Transport: tr}, timeout: timeout, Drivers: names.DRADrivers}, nil
}

// Close closes the idle connections.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// List asks the kubelet which containers hold which GPU devices.
func (c *Client) List(ctx context.Context) (Allocations, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	msg, err := c.call(ctx, "/v1.PodResourcesLister/List", nil)
	if err != nil {
		return Allocations{}, fmt.Errorf("pod-resources List: %w", err)
	}
	pods, err := decodeList(msg)
	if err != nil {
		return Allocations{}, fmt.Errorf("pod-resources List: %w", err)
	}
	return fromPods(pods, c.Drivers), nil
}

// call makes a unary gRPC call: the request message framed (no
// compression, its length), and the one message of the answer, once the
// trailers say it succeeded.
func (c *Client) call(ctx context.Context, method string, req []byte) ([]byte, error) {
	body := make([]byte, 5, 5+len(req))
	binary.BigEndian.PutUint32(body[1:], uint32(len(req)))
	body = append(body, req...)
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://kubelet"+method, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	r.Header.Set("Content-Type", "application/grpc")
	r.Header.Set("TE", "trailers")
	resp, err := c.http.Do(r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 5+maxMessage+1))
	if err != nil {
		return nil, err
	}
	status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only answer: an error before any message
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if status != "0" {
		return nil, fmt.Errorf("gRPC status %s: %s", status, message)
	}
	if len(b) < 5 || b[0] != 0 {
		return nil, errors.New("no uncompressed message in the answer")
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if n > maxMessage || int(n) != len(b)-5 {
		return nil, fmt.Errorf("a message of %d bytes in an answer of %d", n, len(b)-5)
	}
	return b[5:], nil
}

// fromPods turns a List answer into allocations: device plugins' GPU
// resources by unit, and the devices of the DRA drivers named.
func fromPods(pods []pod, drivers []string) Allocations {
	out := Allocations{Units: map[string][]Container{}, Devices: map[Device][]Container{}}
	for _, p := range pods {
		for _, c := range p.containers {
			holder := Container{Namespace: p.namespace, Pod: p.name, Container: c.name}
			for _, d := range c.devices {
				if !names.IsGPUResource(d.resource) {
					continue
				}
				for _, id := range d.ids {
					id, _, _ = strings.Cut(id, "::")
					if !slices.Contains(out.Units[id], holder) {
						out.Units[id] = append(out.Units[id], holder)
					}
				}
			}
			for _, dr := range c.claims {
				claimed := holder
				claimed.Claim = Claim{Namespace: dr.namespace, Name: dr.name}
				for _, d := range dr.devices {
					if !slices.Contains(drivers, d.Driver) || d.Name == "" {
						continue
					}
					if !slices.Contains(out.Devices[d], claimed) {
						out.Devices[d] = append(out.Devices[d], claimed)
					}
				}
			}
		}
	}
	for _, cs := range out.Units {
		sortContainers(cs)
	}
	for _, cs := range out.Devices {
		sortContainers(cs)
	}
	return out
}

func sortContainers(cs []Container) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		return a.Container < b.Container
	})
}
