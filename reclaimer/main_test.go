package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	b, err := os.ReadFile("reclaimer.example.yml")
	require.NoError(t, err)
	// The example points at /etc; point its secrets at files that exist here.
	for _, f := range []string{"webhook-token", "node-token", "read-token"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("secret\n"), 0o600))
	}
	cfg := strings.ReplaceAll(string(b), "/etc/gpureclaim/", dir+"/")
	path := filepath.Join(dir, "reclaimer.yml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))

	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(context.Background(), []string{"--config.check", "--config.file=" + path}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "OK (2 policies, 1 notifiers)")

	require.NoError(t, os.Remove(filepath.Join(dir, "node-token")))
	out.Reset()
	require.Equal(t, 1, run(context.Background(), []string{"--config.check", "--config.file=" + path}, &out, &errOut))
	require.Contains(t, errOut.String(), "nodes.authorization.credentials_file: open")
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--step.interval=1ms"}, "--step.interval"},
		{[]string{"--storage.backend=etcd"}, `--storage.backend: "etcd" is not bbolt or kubernetes`},
		{[]string{"--leader-elect"}, "--leader-elect: the replicas share their state in Kubernetes: set --storage.backend=kubernetes"},
		{[]string{"--leader-elect", "--storage.backend=kubernetes", "--leader-elect.renew-deadline=20s"}, "want retry-period (2s) < renew-deadline (20s) < lease-duration (15s)"},
	} {
		var errOut bytes.Buffer
		require.Equal(t, 2, run(context.Background(), tc.args, io.Discard, &errOut), "%v", tc.args)
		require.Contains(t, errOut.String(), tc.want)
	}
}

// The reclaimer links no exporter code, no simulator and no go-nvml, and
// builds without cgo.
func TestLinksNoNodeCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	require.NoError(t, err)
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/NVIDIA/go-nvml",
			"github.com/gpureclaim/gpureclaim/exporter",
			"github.com/gpureclaim/gpureclaim/internal/sim",
			// The rule manager's service discovery (cloud SDKs, Kafka): the
			// backtest, which evaluates rules, is its own command.
			"github.com/prometheus/prometheus/discovery",
			"github.com/prometheus/prometheus/rules",
			// Alertmanager's notifiers and gossip: the reclaimer reads only
			// the webhook payload.
			"github.com/prometheus/alertmanager/notify",
			"github.com/hashicorp/memberlist",
		} {
			require.False(t, strings.HasPrefix(pkg, banned), "the reclaimer links %s", pkg)
		}
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(t.TempDir(), "reclaimer"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build: %s", b)
}
