// Package podresources reads which pods hold which GPU devices from the
// kubelet's pod-resources API (a gRPC service on a unix socket), and serves
// that API for simulated nodes and tests.
package podresources

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

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

// Client reads allocations from a kubelet.
type Client struct {
	conn    *grpc.ClientConn
	api     podresourcesapi.PodResourcesListerClient
	timeout time.Duration
	// Drivers are the DRA drivers whose devices are read; default
	// names.DRADrivers.
	Drivers []string
}

// Dial connects to the kubelet's socket. The connection is made lazily, so a
// kubelet that starts later is picked up.
func Dial(socket string, timeout time.Duration) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)),
	)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", socket, err)
	}
	return &Client{conn: conn, api: podresourcesapi.NewPodResourcesListerClient(conn), timeout: timeout, Drivers: names.DRADrivers}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List asks the kubelet which containers hold which GPU devices.
func (c *Client) List(ctx context.Context) (Allocations, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.api.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return Allocations{}, fmt.Errorf("pod-resources List: %w", err)
	}
	return FromPods(resp.GetPodResources(), c.Drivers), nil
}

// FromPods turns a List answer into allocations: device plugins' GPU
// resources by unit, and the devices of the DRA drivers named.
func FromPods(pods []*podresourcesapi.PodResources, drivers []string) Allocations {
	out := Allocations{Units: map[string][]Container{}, Devices: map[Device][]Container{}}
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			holder := Container{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if !names.IsGPUResource(d.GetResourceName()) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					id, _, _ = strings.Cut(id, "::")
					if !slices.Contains(out.Units[id], holder) {
						out.Units[id] = append(out.Units[id], holder)
					}
				}
			}
			for _, dr := range c.GetDynamicResources() {
				claimed := holder
				claimed.Claim = Claim{Namespace: dr.GetClaimNamespace(), Name: dr.GetClaimName()}
				for _, cr := range dr.GetClaimResources() {
					if !slices.Contains(drivers, cr.GetDriverName()) || cr.GetDeviceName() == "" {
						continue
					}
					d := Device{Driver: cr.GetDriverName(), Pool: cr.GetPoolName(), Name: cr.GetDeviceName()}
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

// Server serves the pod-resources API from a function, as a kubelet does.
type Server struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	pods func() []*podresourcesapi.PodResources
	grpc *grpc.Server
}

// Serve listens on a unix socket and answers List with pods(). Stop it with Stop.
func Serve(socket string, pods func() []*podresourcesapi.PodResources) (*Server, error) {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	s := &Server{pods: pods, grpc: grpc.NewServer()}
	podresourcesapi.RegisterPodResourcesListerServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(l) }()
	return s, nil
}

// Stop stops serving.
func (s *Server) Stop() { s.grpc.Stop() }

func (s *Server) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: s.pods()}, nil
}
