package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
)

// traceFile writes two days of a trace: pod "day" busy by day, "night" by
// night, "hot" busy all the time; each holds 20 GiB.
func traceFile(t *testing.T) string {
	var b strings.Builder
	b.WriteString("timestamp,pod,gpu_duty_cycle_percent,gpu_memory_used_bytes\n")
	for m := range 2 * 24 * 60 {
		day, night := 2, 80
		if h := (m / 60) % 24; h >= 8 && h < 20 {
			day, night = 80, 2
		}
		ts := 1700000000 + 60*m
		fmt.Fprintf(&b, "%d,day,%d,21474836480\n%d,night,%d,21474836480\n%d,hot,95,21474836480\n", ts, day, ts, night, ts)
	}
	p := filepath.Join(t.TempDir(), "trace.csv")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

type report struct {
	Workloads []struct {
		ID     string `json:"id"`
		GPU    int    `json:"gpu"`
		Change string `json:"change"`
		Fit    struct {
			Kind string `json:"kind"`
		} `json:"fit"`
	} `json:"workloads"`
	GPUs    []struct{ Workloads []string } `json:"shared_gpus"`
	Summary struct {
		Before     int     `json:"gpus_before"`
		After      int     `json:"gpus_after"`
		Freed      float64 `json:"freed_share"`
		CostSaved  float64 `json:"cost_saved"`
		OverMemory float64 `json:"over_memory_share"`
	} `json:"summary"`
}

func TestAdvisorCommand(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "plan.svg")
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--history.trace=" + traceFile(t), "--format=json", "--svg=" + svg, "--cost.per-gpu-hour=2"}, &out, &errb)
	require.Zero(t, code, errb.String())
	var rep report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Len(t, rep.GPUs, 1)
	require.ElementsMatch(t, []string{"day", "night"}, rep.GPUs[0].Workloads)
	require.Equal(t, 3, rep.Summary.Before)
	require.Equal(t, 2, rep.Summary.After)
	require.InDelta(t, 48.0, rep.Summary.CostSaved, 1e-9, "one GPU freed for the replayed day at 2 a GPU-hour")
	for _, w := range rep.Workloads {
		if w.ID == "hot" {
			require.Equal(t, -1, w.GPU)
			require.Equal(t, "whole", w.Fit.Kind)
		}
	}
	b, err := os.ReadFile(svg)
	require.NoError(t, err)
	require.Contains(t, string(b), "<svg")

	out.Reset()
	require.Zero(t, run(context.Background(), []string{"--history.trace=" + traceFile(t), "--format=markdown", "--exclusive=day"}, &out, &errb))
	require.Contains(t, out.String(), "# Packing plan")
	require.Contains(t, out.String(), "marked exclusive: --exclusive")
	require.NotContains(t, out.String(), "packed on GPU", "its partner excluded, the other has none")
}

// The live history is a range query to Prometheus's API.
func TestAdvisorReadsPrometheus(t *testing.T) {
	var query string
	prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		query = r.Form.Get("query")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
	}))
	defer prom.Close()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--prometheus.url=" + prom.URL, "--prometheus.window=1h"}, &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, query, "gpureclaim_unit_")
	require.Contains(t, errb.String(), "gpureclaim-advisor:")
}

// A Prometheus behind a private CA that asks for a client certificate and
// a token: --prometheus.http-config-file gives them, as promtool's
// --http.config.file does.
func TestAdvisorReadsPrometheusOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "prometheus CA")
	client := ca.Client(t, "gpureclaim-advisor")
	var query, auth, name string
	prom := ca.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		query, auth, name = r.Form.Get("query"), r.Header.Get("Authorization"), tlstest.ClientName(r)
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
	}), true)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("s3cret\n"), 0o600))
	cfg := filepath.Join(dir, "http.yml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf("authorization: {credentials_file: token}\ntls_config: {ca_file: %s, cert_file: %s, key_file: %s}\n",
		ca.CAFile, client.CertFile, client.KeyFile)), 0o600))

	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--prometheus.url=" + prom.URL, "--prometheus.window=1h", "--prometheus.http-config-file=" + cfg}, &out, &errb)
	require.Equal(t, 1, code, "an empty history: %s", errb.String())
	require.Contains(t, query, "gpureclaim_unit_")
	require.Equal(t, "Bearer s3cret", auth, "the token file, relative to the config file")
	require.Equal(t, "gpureclaim-advisor", name)

	errb.Reset()
	code = run(context.Background(), []string{"--prometheus.url=" + prom.URL, "--prometheus.window=1h"}, &out, &errb)
	require.Equal(t, 1, code)
	require.Contains(t, errb.String(), "certificate", "without the settings the private CA is not trusted")
}

func TestAdvisorBadFlags(t *testing.T) {
	tr := traceFile(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "give one history"},
		{[]string{"--history.trace=" + tr, "--prometheus.url=http://p"}, 2, "give one history"},
		{[]string{"--history.trace=" + tr, "--gpu.model=V100"}, 2, `--gpu.model: "V100" is not one of`},
		{[]string{"--history.trace=" + tr, "--plan.compute-cap=0"}, 2, "--plan.compute-cap: 0 must be over 0"},
		{[]string{"--history.trace=" + tr, "--plan.memory-cap=1.5"}, 2, "--plan.memory-cap: 1.5"},
		{[]string{"--history.trace=" + tr, "--plan.share=1"}, 2, "--plan.share: 1 must be between 0 and 1"},
		{[]string{"--history.trace=" + tr, "--workloads=some"}, 2, `--workloads: "some" is not all, tuned or held-apart`},
		{[]string{"--history.trace=" + tr, "--format=xml"}, 2, `--format: "xml"`},
		{[]string{"--history.trace=/nonexistent.csv"}, 1, "--history.trace"},
		{[]string{"--history.trace=" + tr, "--prometheus.http-config-file=h.yml"}, 2, "--prometheus.http-config-file: it is for --prometheus.url"},
		{[]string{"--prometheus.url=http://127.0.0.1:1", "--prometheus.http-config-file=/nonexistent.yml"}, 1, "--prometheus.http-config-file: open /nonexistent.yml"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errb.String())
		require.Contains(t, errb.String(), tc.want, tc.args)
	}
}
