// Command gpureclaim-exporter-sim is the exporter on simulated GPUs: the
// exporter's own code (exporter/server) over the scenario-driven NVML of
// internal/sim/nvmlsim, which also writes the node's /proc and serves its
// kubelet socket. With --simulate.kubeconfig it follows the node's pods in
// a cluster. `make run`, the demo and the end-to-end tests run it; a GPU
// node runs gpureclaim-exporter.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/exporter/server"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type simOptions struct {
	scenario, dir, kubeconfig, exposition string
	speed                                 float64
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	so := &simOptions{}
	flags := func(fs *flag.FlagSet) func() error {
		fs.StringVar(&so.scenario, "simulate", "demo", "The scenario: a built-in one ("+fmt.Sprint(nvmlsim.Builtin())+") or a scenario file.")
		fs.Float64Var(&so.speed, "simulate.speed", 0, "Run the scenario this many times faster than the wall clock (default: the scenario's speed).")
		fs.StringVar(&so.kubeconfig, "simulate.kubeconfig", "", "Follow the simulated node's pods in this cluster: a pod deleted there (evicted, scaled down) leaves its simulated GPU; under allocation: dra, the claims the scheduler allocated to the node's pods are reported as the kubelet would.")
		fs.StringVar(&so.dir, "simulate.dir", "", "Where the simulated node writes its /proc tree and kubelet socket (default: a temporary folder).")
		fs.StringVar(&so.exposition, "simulate.exposition", expositionGPUreclaim, "Serve the scenario as gpureclaim's exporter does, or as NVIDIA's dcgm-exporter does (dcgm: its field names, units and labels, for the rules' source: dcgm).")
		return func() error {
			if so.speed < 0 {
				return errors.New("--simulate.speed: must not be negative")
			}
			if so.exposition != expositionGPUreclaim && so.exposition != expositionDCGM {
				return fmt.Errorf("--simulate.exposition: %q is not %s or %s", so.exposition, expositionGPUreclaim, expositionDCGM)
			}
			return nil
		}
	}
	open := func(o *server.Options, logger *slog.Logger) (*server.Node, error) {
		return simulatedNode(so, o, logger)
	}
	return server.Main(ctx, "gpureclaim-exporter-sim", args, stdout, stderr, flags, open)
}

func simulatedNode(so *simOptions, o *server.Options, logger *slog.Logger) (*server.Node, error) {
	sc, err := nvmlsim.Open(so.scenario)
	if err != nil {
		return nil, err
	}
	if so.speed > 0 {
		sc.Speed = so.speed
	}
	sn, err := nvmlsim.StartNode(sc, so.dir, time.Now)
	if err != nil {
		return nil, err
	}
	client, err := podresources.Dial(sn.Socket, 5*time.Second)
	if err != nil {
		sn.Close()
		return nil, err
	}
	name := sc.Node
	if o.Node != "" {
		name = o.Node
	}
	n := &server.Node{
		NVML: sn, Name: name,
		Proc:     procfs.New(sn.ProcRoot, sn.Passwd),
		Allocs:   client,
		Signaler: signaler{sn.Sim},
		Close:    func() { client.Close(); sn.Close() },
	}
	// The scenario names its pods' UIDs, which a node does not know: with
	// --kubernetes.node-pods the simulated node is attributed as a real one,
	// from the cluster's pod list.
	if !o.NodePods {
		n.Pods = podmeta.NewStatic(sn.PodMeta())
	}
	if so.exposition == expositionDCGM {
		n.Collectors = func(src collector.Source) []prometheus.Collector {
			return []prometheus.Collector{newDCGMCollector(src)}
		}
	}
	if so.kubeconfig != "" {
		w, err := newPodWatch(so.kubeconfig, sn.Sim, name, logger)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("--simulate.kubeconfig: %w", err)
		}
		n.Start = w.run
	}
	logger.Info("running on simulated GPUs", "scenario", so.scenario, "system", sc.System, "speed", sc.Speed, "proc", sn.ProcRoot)
	return n, nil
}

// signaler ends the simulator's processes: SIGTERM or SIGKILL ends one.
type signaler struct{ sim *nvmlsim.Sim }

func (s signaler) Signal(pid int, sig syscall.Signal) error {
	if sig == syscall.SIGTERM || sig == syscall.SIGKILL {
		s.sim.Kill(pid)
	}
	return nil
}

func (s signaler) Alive(pid int, _ time.Time) bool { return s.sim.Alive(pid) }
