// Package kubetest runs a real kube-apiserver on etcd for the tests, from
// the binaries `make tools` builds (see internal/cluster).
package kubetest

import (
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/gpureclaim/gpureclaim/internal/cluster"
	"github.com/gpureclaim/gpureclaim/internal/tooltest"
)

// Tokens of the two users.
const (
	AdminToken     = cluster.AdminToken
	ReclaimerToken = cluster.ReclaimerToken
	ReclaimerUser  = cluster.ReclaimerUser
)

// Cluster is a running control plane for one test.
type Cluster struct {
	*cluster.Cluster
	t testing.TB
}

// Start runs etcd and kube-apiserver; with full, also the controller
// manager, the scheduler and kwok.
func Start(t testing.TB, full bool) *Cluster {
	t.Helper()
	bins := []string{"etcd", "kube-apiserver"}
	if full {
		bins = append(bins, "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages.yaml")
	}
	var dir string
	for _, b := range bins {
		dir = filepath.Dir(tooltest.Bin(t, b))
	}
	c, err := cluster.Start(cluster.Options{Bin: dir, Dir: t.TempDir(), Full: full, Stages: filepath.Join(dir, "kwok-stages.yaml")})
	t.Cleanup(c.Stop)
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Cluster: c, t: t}
}

// Client returns a clientset that authenticates with token.
func (c *Cluster) Client(t testing.TB, token string) kubernetes.Interface {
	cs, err := c.Cluster.Client(token)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
