package main

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNoDriverSaysHowToSimulate(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), nil, io.Discard, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "NVML could not start")
	require.Contains(t, stderr.String(), "gpureclaim-exporter-sim --simulate=demo")
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--sample.interval=100ms", "--sample.interval: 100ms is under 1s"},
		{"--log.level=loud", "--log.level"},
		{"--simulate=demo", "flag provided but not defined: -simulate"},
		{"extra", "unexpected arguments"},
		{"--action.listen-address=:9848", "--action.listen-address: needs --action.token-file"},
		{"--action.token-file=t --path.procfs=", "--path.procfs must not be empty"},
		{"--action.idle-threshold=1.5 --action.token-file=t", "--action.idle-threshold: 1.5 must be between 0 and 1"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), strings.Fields(tc.args), io.Discard, &stderr)
		require.Equal(t, 2, code, tc.args)
		require.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

// The exporter a GPU node runs links only what it runs there: no
// Kubernetes client, no simulator, no fake servers.
func TestLinksOnlyWhatANodeRuns(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"k8s.io/client-go", "github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim", "github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest",
			"github.com/NVIDIA/go-nvml/pkg/nvml/mock", "net/http/httptest", "github.com/gpureclaim/gpureclaim/exporter/simulated"} {
			require.False(t, strings.HasPrefix(pkg, banned), "the exporter links %s", pkg)
		}
	}
}
