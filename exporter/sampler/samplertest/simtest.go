// Package samplertest builds simulated nodes and samplers for tests and
// benchmarks: a scenario, its /proc tree, a kubelet pod-resources socket
// served over gRPC, and a clock the test moves.
package samplertest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
)

// T0 is the scenario time 0 of every test node.
var T0 = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// NewClock starts a clock at t.
func NewClock(t time.Time) *fakeclock.Clock { return fakeclock.New(t) }

// Node is a simulated node with a sampler reading it.
type Node struct {
	*nvmlsim.Node
	Sampler *sampler.Sampler
	Clock   *fakeclock.Clock
}

// Scenario parses a scenario given inline.
func Scenario(t testing.TB, yaml string) *nvmlsim.Scenario {
	t.Helper()
	sc, err := nvmlsim.Parse([]byte(yaml), ".")
	require.NoError(t, err)
	return sc
}

// Builtin opens a built-in scenario.
func Builtin(t testing.TB, name string) *nvmlsim.Scenario {
	t.Helper()
	sc, err := nvmlsim.Open(name)
	require.NoError(t, err)
	return sc
}

// NoPods, as a wrapped config's Pods, starts the sampler with no pod
// metadata at all, as the node binary runs without a pod list.
var NoPods podmeta.Resolver = noPods{}

type noPods struct{}

func (noPods) PodByUID(string) (podmeta.Pod, bool)          { return podmeta.Pod{}, false }
func (noPods) PodByName(string, string) (podmeta.Pod, bool) { return podmeta.Pod{}, false }

// Start runs a scenario from T0 with the given NVML in front of it (nil: the
// simulator itself), connected to the sampler as the exporter connects them.
func Start(t testing.TB, sc *nvmlsim.Scenario, wrap func(*nvmlsim.Sim) sampler.Config) *Node {
	t.Helper()
	sc.Start = T0
	clock := NewClock(T0)
	sn, err := nvmlsim.StartNode(sc, t.TempDir(), clock.Now)
	require.NoError(t, err)
	t.Cleanup(sn.Close)
	client, err := podresources.Dial(sn.Socket, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	cfg := sampler.Config{NVML: sn.Sim}
	if wrap != nil {
		cfg = wrap(sn.Sim)
	}
	cfg.Node = sc.Node
	if cfg.Proc == nil {
		cfg.Proc = procfs.New(sn.ProcRoot, sn.Passwd)
	}
	cfg.Allocations = client
	switch cfg.Pods {
	case NoPods:
		cfg.Pods = nil // as the node binary without --kubernetes.node-pods
	case nil:
		cfg.Pods = podmeta.NewStatic(sn.PodMeta())
	}
	cfg.Clock = clock.Now
	return &Node{Node: sn, Sampler: sampler.New(cfg), Clock: clock}
}

// SampleAt takes two samples, gap apart, ending at scenario time at, so that
// GPM values cover [at-gap, at].
func (n *Node) SampleAt(t testing.TB, at, gap time.Duration) *sampler.Snapshot {
	t.Helper()
	n.Clock.Set(T0.Add(at - gap))
	n.Sampler.Sample(context.Background())
	n.Clock.Set(T0.Add(at))
	return n.Sampler.Sample(context.Background())
}
