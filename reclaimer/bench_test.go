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
// answered-s until its answer, written-s until every reclaim is stored, and
// peak-rss-MiB the process's peak resident memory (VmHWM). Then it starts
// the binary again on that file: restart-ready-s until it is ready with
// every reclaim loaded, restart-peak-rss-MiB its peak resident memory, and
// restart-anon-MiB and restart-file-MiB what it holds once ready, its own
// memory and the pages of the mapped file (page cache, which the kernel
// takes back under a cgroup's limit rather than end the process).
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
	var answered, written, ready time.Duration
	var peak, restartPeak, anon, file int
	run := 0
	for b.Loop() {
		b.StopTimer()
		run++
		addr := tooltest.FreeAddr(b)
		var out bytes.Buffer
		// start runs the binary on this run's file: it starts empty, then again on what it stored.
		start := func() *exec.Cmd {
			cmd := exec.Command(bin, "--config.file="+cfg, "--web.listen-address="+addr, "--storage.path="+filepath.Join(dir, fmt.Sprintf("s%d.db", run)))
			cmd.Dir = dir
			out.Reset()
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			return cmd
		}
		cmd := start()
		for i := 0; !(&replica{addr: addr}).ready(); i++ {
			if i > 1000 {
				b.Fatalf("the reclaimer is not ready: %s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		b.StartTimer()
		began := time.Now()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/webhook", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer am-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%v %v", resp, err)
		}
		resp.Body.Close()
		answered += time.Since(began)
		for !settled(addr, n) {
			time.Sleep(10 * time.Millisecond)
		}
		written += time.Since(began)
		b.StopTimer()
		peak = max(peak, procStatus(b, cmd.Process.Pid, "VmHWM"))
		_ = cmd.Process.Kill()
		_ = cmd.Wait()

		began = time.Now()
		again := start()
		for !settled(addr, n) {
			if time.Since(began) > 2*time.Minute {
				b.Fatalf("the restarted reclaimer did not load the store: %s", out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		ready += time.Since(began)
		restartPeak = max(restartPeak, procStatus(b, again.Process.Pid, "VmHWM"))
		anon = max(anon, procStatus(b, again.Process.Pid, "RssAnon"))
		file = max(file, procStatus(b, again.Process.Pid, "RssFile"))
		_ = again.Process.Kill()
		_ = again.Wait()
		b.StartTimer()
	}
	b.ReportMetric(answered.Seconds()/float64(b.N), "answered-s")
	b.ReportMetric(written.Seconds()/float64(b.N), "written-s")
	b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
	b.ReportMetric(ready.Seconds()/float64(b.N), "restart-ready-s")
	b.ReportMetric(float64(restartPeak)/1024, "restart-peak-rss-MiB")
	b.ReportMetric(float64(anon)/1024, "restart-anon-MiB")
	b.ReportMetric(float64(file)/1024, "restart-file-MiB")
}

// settled says the reclaimer holds n reclaims, all of them in the store,
// both read from one scrape of its metrics.
func settled(addr string, n int) bool {
	m := scrape(addr)
	return m != nil && m["gpureclaim_reclaimer_unwritten_reclaims"] == 0 && m["gpureclaim_reclaimer_reclaims"] == float64(n)
}

// unwritten reads how many decided reclaims are not yet in the store.
func unwritten(addr string) int {
	if m := scrape(addr); m != nil {
		return int(m["gpureclaim_reclaimer_unwritten_reclaims"])
	}
	return -1
}

// scrape reads the reclaimer's metrics, each name's series added up; nil
// when it cannot.
func scrape(addr string) map[string]float64 {
	if !(&replica{addr: addr}).ready() {
		return nil
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	sums := map[string]float64{}
	for _, line := range strings.Split(buf.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(f[0], "{")
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sums[name] += v
	}
	return sums
}

// procStatus is a field of a process's /proc status in KiB (VmHWM,
// RssAnon, RssFile).
func procStatus(b *testing.B, pid int, field string) int {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(s), "\n") {
		if strings.HasPrefix(line, field+":") {
			v, _ := strconv.Atoi(strings.Fields(line)[1])
			return v
		}
	}
	b.Fatalf("no %s", field)
	return 0
}
