package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// BenchmarkNotification100k posts one Alertmanager notification of
// 100,000 firing alerts (46 MB) to the reclaimer binary on bbolt:
// answered-s until its answer, ns/op until every reclaim is stored, and
// peak-rss-MiB the process's peak resident memory (VmHWM).
func BenchmarkNotification100k(b *testing.B) {
	const n = 100000
	dir := b.TempDir()
	bin := tooltest.Build(b, dir, "./reclaimer", "gpureclaim-reclaimer")
	if err := os.WriteFile(filepath.Join(dir, "webhook.token"), []byte("am-token\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "bench.yml")
	if err := os.WriteFile(cfg, []byte(`webhook: {bearer_token_file: webhook.token, max_body_bytes: 64MiB}
web: {auth: {none: true}}
alertmanager: {url: "http://127.0.0.1:1"}
kubernetes: {enabled: false}
circuit_breaker: {max_pending: 0}
policies: [{name: idle, matchers: ['alertname="GPUIdle"'], action: notify}]
`), 0o600); err != nil {
		b.Fatal(err)
	}
	body := reclaimtest.Notification(b, n, time.Now().Add(-time.Hour).UTC().Truncate(time.Second))
	var answered time.Duration
	var peak int
	run := 0
	for b.Loop() {
		b.StopTimer()
		run++
		addr := tooltest.FreeAddr(b)
		cmd := exec.Command(bin, "--config.file="+cfg, "--web.listen-address="+addr, "--storage.path="+filepath.Join(dir, fmt.Sprintf("s%d.db", run)))
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		for i := 0; !(&replica{addr: addr}).ready(); i++ {
			if i > 1000 {
				b.Fatalf("the reclaimer is not ready: %s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.StartTimer()
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhook", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer am-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%v %v", resp, err)
		}
		resp.Body.Close()
		answered += time.Since(start)
		for !settled(addr, n) {
			time.Sleep(10 * time.Millisecond)
		}
		b.StopTimer()
		peak = max(peak, vmHWM(b, cmd.Process.Pid))
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.StartTimer()
	}
	b.ReportMetric(answered.Seconds()/float64(b.N), "answered-s")
	b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
}

// settled says the reclaimer holds n reclaims, all of them in the store.
func settled(addr string, n int) bool {
	return unwritten(addr) == 0 && held(addr) == n
}

// unwritten reads how many decided reclaims are not yet in the store.
func unwritten(addr string) int {
	return int(sumOf(addr, "gpureclaim_reclaimer_unwritten_reclaims"))
}

// held reads how many reclaims the reclaimer holds, in any state.
func held(addr string) int {
	return int(sumOf(addr, "gpureclaim_reclaimer_reclaims{"))
}

// sumOf adds up the series of the reclaimer's metrics whose line starts
// with prefix; -1 when it cannot read them.
func sumOf(addr, prefix string) float64 {
	if !(&replica{addr: addr}).ready() {
		return -1
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	sum, found := 0.0, false
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			v, _ := strconv.ParseFloat(strings.Fields(line)[len(strings.Fields(line))-1], 64)
			sum, found = sum+v, true
		}
	}
	if !found {
		return -1
	}
	return sum
}

// vmHWM is a process's peak resident memory in KiB.
func vmHWM(b *testing.B, pid int) int {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			v, _ := strconv.Atoi(strings.Fields(line)[1])
			return v
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
