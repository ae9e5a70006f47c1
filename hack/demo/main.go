// Command demo runs the whole system on loopback on a simulated 8-GPU H100
// node, on a compressed clock (a minute of the scenario is a second), and
// prints what happens. `make run` builds what it needs and starts it;
// Ctrl-C stops everything it started.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/sim/stack"
	"github.com/gpureclaim/gpureclaim/rules"
)

// The demo's clock runs a minute a second: the reclaimer looks for the
// release every second too.
const reclaimerPolicies = `notifiers: [{type: log}]
release: {interval: 1s}
policies:
  - name: idle
    matchers: ['alertname="GPUIdle"']
    action: auto
    grace: 5s
    min_runtime: 0s
  - name: notify
    matchers: ['alertname=~"GPUWasted|GPUOvercommitted|MIGInstanceOversized"']
    action: notify
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	dir := filepath.Join(root, ".run", time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rulesFile, err := rules.RenderFile(filepath.Join(root, "rules", "demo.yaml"))
	if err != nil {
		return err
	}
	role, err := deploy.ReclaimerClusterRole(root)
	if err != nil {
		return err
	}
	fmt.Printf("gpureclaim demo: one simulated 8-GPU H100 node, a scenario minute per second. Logs and state in %s\n\n", dir)
	s, err := stack.New(stack.Options{
		Bin:           filepath.Join(root, "bin"),
		Dir:           dir,
		Nodes:         []*stack.Node{{Scenario: "demo"}},
		Speed:         60,
		Rules:         rulesFile,
		Kubernetes:    true,
		IdleWindow:    5 * time.Second,
		ReclaimerRole: role,
		Log:           os.Stdout,
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nstopping everything the demo started ...")
		s.Stop()
		fmt.Println("stopped.")
	}()
	var tl *stack.Timeline
	steps := []func(context.Context) error{
		s.StartKubernetes, s.CreatePods, s.StartExporters,
		func(context.Context) error { tl = s.NewTimeline(os.Stdout); return nil }, // the scenario starts with its exporter
		s.StartAlertmanager,
		func(ctx context.Context) error { return s.StartReclaimer(ctx, reclaimerPolicies) },
		s.StartPrometheus,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Printf(`
The notebook on GPU 2 stops working at scenario minute 5; the rules call a
GPU idle after 10 minutes, the reclaimer warns its owner (here: the console
and the status page) and evicts it 5 minutes later. Wasted, oversized and
overcommitted GPUs are notified. Press Ctrl-C to stop.

`)
	tl.Run(ctx)
	return nil
}
