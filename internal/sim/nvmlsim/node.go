package nvmlsim

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Node is a running simulated node: the NVML simulator, its /proc tree and
// passwd file, and a kubelet pod-resources socket serving its pods.
type Node struct {
	*Sim
	ProcRoot, Passwd, Socket string

	srv     *PodResourcesServer
	cleanup func()
}

// StartNode builds the simulator and writes its files under dir (a new
// temporary folder when dir is empty, removed by Close).
func StartNode(sc *Scenario, dir string, now func() time.Time) (*Node, error) {
	sim, err := New(sc, now)
	if err != nil {
		return nil, err
	}
	n := &Node{Sim: sim, cleanup: func() {}}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "gpureclaim-sim-"); err != nil {
			return nil, err
		}
		n.cleanup = func() { os.RemoveAll(dir) }
	}
	if n.ProcRoot, n.Passwd, err = sim.WriteFS(dir); err != nil {
		n.cleanup()
		return nil, err
	}
	n.Socket = filepath.Join(dir, "kubelet.sock")
	if n.srv, err = ServePodResources(n.Socket, sim.PodResources); err != nil {
		n.cleanup()
		return nil, fmt.Errorf("serving the simulated kubelet's pod resources: %w", err)
	}
	return n, nil
}

// Close stops the kubelet socket and removes what StartNode created.
func (n *Node) Close() {
	n.srv.Stop()
	n.cleanup()
}
