package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBadScenarioExitsNamingTheField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte("node: n1\nsystem: dgxh100\ngpus:\n  - index: 2\n    sm_active: 140%\n"), 0o644))
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--simulate=" + path}, io.Discard, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "gpus[0].sm_active: values must lie between 0 and 1, got 1.4 to 1.4")
	require.Contains(t, stderr.String(), path)
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--simulate=nope", `scenario "nope" is neither a file nor built in (demo`},
		{"--simulate.speed=-2", "--simulate.speed: must not be negative"},
		{"--sample.interval=100ms", "--sample.interval: 100ms is under 1s"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), strings.Fields(tc.args), io.Discard, &stderr)
		require.NotZero(t, code, tc.args)
		require.Contains(t, stderr.String(), tc.want, tc.args)
	}
}

func TestServesTheDemoAndStops(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"--web.listen-address=" + addr, "--simulate.dir=" + t.TempDir()}, io.Discard, io.Discard)
	}()
	var body string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "gpureclaim_unit_owner_info")
	}, 10*time.Second, 50*time.Millisecond)
	require.Contains(t, body, `gpureclaim_gpu_info{gpu_index="7"`, "the demo scenario by default")
	require.Contains(t, body, "gpureclaim_exporter_build_info")
	cancel()
	select {
	case code := <-done:
		require.Zero(t, code)
	case <-time.After(10 * time.Second):
		t.Fatal("did not stop")
	}
}

func TestBadExposition(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"--simulate.exposition=nvml"}, io.Discard, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), `--simulate.exposition: "nvml" is not gpureclaim or dcgm`)
}
