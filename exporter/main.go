// Command gpureclaim-exporter exports GPU, MIG, MPS and owner metrics from
// NVML for Prometheus, through the node's NVIDIA driver. It links only what
// a GPU node runs; gpureclaim-exporter-sim (exporter/simulated) runs the
// same code on simulated GPUs.
package main

import (
	"context"
	"io"
	"os"

	"github.com/gpureclaim/gpureclaim/exporter/server"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return server.Main(ctx, "gpureclaim-exporter", args, stdout, stderr, nil, server.RealNode)
}
