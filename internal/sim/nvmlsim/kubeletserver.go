package nvmlsim

import (
	"context"
	"net"
	"os"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResourcesServer serves the kubelet's pod-resources API from a
// function, with the kubelet's own generated gRPC service: the exporter's
// hand-written client is tested against it.
type PodResourcesServer struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	pods func() []*podresourcesapi.PodResources
	grpc *grpc.Server
}

// ServePodResources listens on a unix socket and answers List with pods().
// Stop it with Stop.
func ServePodResources(socket string, pods func() []*podresourcesapi.PodResources) (*PodResourcesServer, error) {
	_ = os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	s := &PodResourcesServer{pods: pods, grpc: grpc.NewServer()}
	podresourcesapi.RegisterPodResourcesListerServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(l) }()
	return s, nil
}

// Stop stops serving.
func (s *PodResourcesServer) Stop() { s.grpc.Stop() }

func (s *PodResourcesServer) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	return &podresourcesapi.ListPodResourcesResponse{PodResources: s.pods()}, nil
}
