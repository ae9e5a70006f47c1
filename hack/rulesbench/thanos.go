package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// runThanos is run on Thanos Ruler: the history in a Prometheus that
// evaluates nothing, a Thanos sidecar beside it, Thanos Query over the
// sidecar and the ruler, and thanos rule evaluating the rules through
// Query, as a fleet's global ruler does; it reads its own records back
// through Query. Beside the groups' times, the CPU of all four processes
// and each one's peak resident memory.
func runThanos(gpus, hours, evals int, rulesFile, promBin, thanosBin string, head, interval time.Duration) error {
	dir, err := os.MkdirTemp("", "rulesbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	us := fleet(gpus)
	end := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	start := end.Add(-time.Duration(hours) * time.Hour)
	ss, err := fleetSeries(us, 1)
	if err != nil {
		return err
	}
	t0 := time.Now()
	n, err := writeHistory(data, ss, start, end, head)
	if err != nil {
		return fmt.Errorf("writing the history: %w", err)
	}
	fmt.Fprintf(os.Stderr, "%d GPUs, %d units, %d clusters: %d series, %d samples written in %s\n", gpus, len(us), clusters, len(ss), n, time.Since(t0).Round(time.Second))

	// The sidecar wants an external label that tells this Prometheus from
	// its replicas; Query drops it as a replica label.
	cfg := "global: {external_labels: {prometheus_replica: p0}}\n"
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	prom, promURL, err := serve(dir, "prometheus", promBin, "/-/ready", func(addr string) []string {
		return []string{"--config.file=" + filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path=" + data,
			"--storage.tsdb.retention.time=30d", "--web.listen-address=" + addr, "--log.level=warn"}
	})
	if err != nil {
		return err
	}
	defer stop(prom)
	var grpc [3]string // the sidecar's, Query's and the ruler's
	for i := range grpc {
		if grpc[i], err = freeAddr(); err != nil {
			return err
		}
	}
	sidecarGRPC, queryGRPC, ruleGRPC := grpc[0], grpc[1], grpc[2]
	sidecar, _, err := serve(dir, "sidecar", thanosBin, "/-/ready", func(addr string) []string {
		return []string{"sidecar", "--prometheus.url=" + promURL, "--tsdb.path=" + data, "--http-address=" + addr,
			"--grpc-address=" + sidecarGRPC, "--log.level=warn"}
	})
	if err != nil {
		return err
	}
	defer stop(sidecar)
	query, queryURL, err := serve(dir, "query", thanosBin, "/-/ready", func(addr string) []string {
		return []string{"query", "--http-address=" + addr, "--grpc-address=" + queryGRPC,
			"--endpoint=" + sidecarGRPC, "--endpoint=" + ruleGRPC,
			"--query.replica-label=prometheus_replica", "--query.replica-label=rule_replica", "--log.level=warn"}
	})
	if err != nil {
		return err
	}
	defer stop(query)
	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		return err
	}
	readers := []*exec.Cmd{prom, sidecar, query} // what the ruler's queries cost
	cpu0 := cpuSeconds(readers...)
	rule, ruleURL, err := serve(dir, "rule", thanosBin, "/-/ready", func(addr string) []string {
		return []string{"rule", "--http-address=" + addr, "--grpc-address=" + ruleGRPC, "--data-dir=" + filepath.Join(dir, "rule"),
			"--rule-file=" + abs, "--eval-interval=" + interval.String(), "--query=" + strings.TrimPrefix(queryURL, "http://"),
			`--label=rule_replica="r0"`, "--log.level=warn"}
	})
	if err != nil {
		return err
	}
	defer stop(rule)
	began := time.Now()
	w := watchGroups(ruleURL, evals, interval, false)
	took := time.Since(began)
	if len(w.seen) == 0 {
		b, _ := os.ReadFile(filepath.Join(dir, "rule.log"))
		return fmt.Errorf("thanos rule evaluated no group:\n%s", b)
	}
	ruleCPU := cpuSeconds(rule)
	cpu := cpuSeconds(readers...) - cpu0 + ruleCPU
	w.printGroups(gpus, len(ss))
	mib := func(pid int) int { return peakRSS(pid) >> 10 }
	fmt.Printf("\nWhile evaluating (%s): Prometheus, sidecar, Query and Ruler spent %.1f CPU-seconds (%.2f cores; the ruler %.2f); peak resident memory %d, %d, %d and %d MiB.\n",
		took.Round(time.Second), cpu, cpu/took.Seconds(), ruleCPU/took.Seconds(),
		mib(prom.Process.Pid), mib(sidecar.Process.Pid), mib(query.Process.Pid), mib(rule.Process.Pid))
	w.printAlerts()
	return w.err()
}
