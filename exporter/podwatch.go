package main

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpureclaim/gpureclaim/internal/nvmlsim"
)

// podWatch keeps a simulated node's pods in step with a cluster: a pod that
// was there and is gone, or terminating, is gone from the simulated node too.
type podWatch struct {
	cs   kubernetes.Interface
	sim  *nvmlsim.Sim
	node string
	log  *slog.Logger
	seen map[string]bool
}

func newPodWatch(kubeconfig string, sim *nvmlsim.Sim, node string, log *slog.Logger) (*podWatch, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &podWatch{cs: cs, sim: sim, node: node, log: log, seen: map[string]bool{}}, nil
}

func (w *podWatch) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *podWatch) sync(ctx context.Context) {
	pods, err := w.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + w.node})
	if err != nil {
		w.log.Warn("listing the simulated node's pods", "err", err)
		return
	}
	running := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			running[p.Name] = true
		}
	}
	for _, p := range w.sim.Scenario().Pods {
		switch {
		case running[p.Name]:
			w.seen[p.Name] = true
		case w.seen[p.Name]:
			if w.sim.RemovePod(p.Name) {
				w.log.Info("pod left the cluster: its GPUs are free", "pod", p.Namespace+"/"+p.Name)
			}
		}
	}
}
