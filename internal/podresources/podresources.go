// Package podresources reads which pods hold which GPU devices from the
// kubelet's pod-resources API (a gRPC service on a unix socket), and serves
// that API for simulated nodes and tests.
package podresources

import (
	"context"
	"fmt"
	"net"
	"os"
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

// Container is a pod's container that holds a device.
type Container struct {
	Namespace, Pod, Container string
}

// Allocations maps a unit's UUID (GPU-… or MIG-…) to the containers that
// hold it. A replica of a shared GPU (<uuid>::<n>) counts for its GPU.
type Allocations map[string][]Container

// Client reads allocations from a kubelet.
type Client struct {
	conn    *grpc.ClientConn
	api     podresourcesapi.PodResourcesListerClient
	timeout time.Duration
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
	return &Client{conn: conn, api: podresourcesapi.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// List asks the kubelet which containers hold which GPU devices.
func (c *Client) List(ctx context.Context) (Allocations, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.api.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod-resources List: %w", err)
	}
	return FromPods(resp.GetPodResources()), nil
}

// FromPods turns a List answer into allocations per unit.
func FromPods(pods []*podresourcesapi.PodResources) Allocations {
	out := Allocations{}
	for _, p := range pods {
		for _, c := range p.GetContainers() {
			holder := Container{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}
			for _, d := range c.GetDevices() {
				if !names.IsGPUResource(d.GetResourceName()) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					id, _, _ = strings.Cut(id, "::")
					if !contains(out[id], holder) {
						out[id] = append(out[id], holder)
					}
				}
			}
		}
	}
	for _, cs := range out {
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
	return out
}

func contains(cs []Container, c Container) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
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
