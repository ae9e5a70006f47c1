package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
)

// runVictoriaMetrics is run on VictoriaMetrics: the history imported into
// single-node VictoriaMetrics, the rules evaluated over it by vmalert, which
// writes their results back. A group's time is the sum of its rules' (vmalert
// evaluates a group's rules in turn); beside it, the CPU both processes spent
// and their peak resident memory.
func runVictoriaMetrics(gpus, hours, evals int, rulesFile, vmBin string, interval time.Duration) error {
	dir, err := os.MkdirTemp("", "rulesbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	us := fleet(gpus)
	end := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	start := end.Add(-time.Duration(hours) * time.Hour)
	ss, err := fleetSeries(us, 1)
	if err != nil {
		return err
	}
	vm, vmURL, err := serve(dir, "victoria-metrics", vmBin, "/health", func(addr string) []string {
		return []string{"-httpListenAddr=" + addr, "-storageDataPath=" + filepath.Join(dir, "vm"), "-retentionPeriod=30d", "-loggerLevel=WARN"}
	})
	if err != nil {
		return err
	}
	defer stop(vm)
	t0 := time.Now()
	n, err := importHistory(vmURL, ss, start, int(end.Sub(start)/step))
	if err != nil {
		return fmt.Errorf("importing the history: %w", err)
	}
	resp, err := http.Get(vmURL + "/internal/force_flush")
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Fprintf(os.Stderr, "%d GPUs, %d units, %d clusters: %d series, %d samples imported in %s\n", gpus, len(us), clusters, len(ss), n, time.Since(t0).Round(time.Second))
	cpu0 := cpuSeconds(vm)

	abs, err := filepath.Abs(rulesFile)
	if err != nil {
		return err
	}
	va, vaURL, err := serve(dir, "vmalert", vmalertBin, "/health", func(addr string) []string {
		return []string{"-httpListenAddr=" + addr, "-rule=" + abs, "-datasource.url=" + vmURL, "-remoteWrite.url=" + vmURL,
			"-evaluationInterval=" + interval.String(), "-notifier.blackhole", "-loggerLevel=WARN"}
	})
	if err != nil {
		return err
	}
	defer stop(va)

	began := time.Now()
	w := watchGroups(vaURL, evals, interval, true)
	took := time.Since(began)
	if len(w.seen) == 0 {
		return fmt.Errorf("vmalert evaluated no group")
	}
	cpu := cpuSeconds(vm) - cpu0 + cpuSeconds(va)
	w.printGroups(gpus, len(ss))
	fmt.Printf("\nWhile evaluating (%s): VictoriaMetrics and vmalert spent %.1f CPU-seconds (%.2f cores); peak resident memory %d MiB and %d MiB.\n",
		took.Round(time.Second), cpu, cpu/took.Seconds(), peakRSS(vm.Process.Pid)>>10, peakRSS(va.Process.Pid)>>10)
	w.printAlerts()
	return w.err()
}

// importHistory streams every series' samples into VictoriaMetrics an hour
// at a time, as JSON lines (/api/v1/import).
func importHistory(base string, ss []series, start time.Time, minutes int) (int, error) {
	samples := 0
	for m0 := 0; m0 <= minutes; m0 += 60 {
		pr, pw := io.Pipe()
		go func() {
			w := bufio.NewWriterSize(pw, 1<<20)
			for _, s := range ss {
				metric := map[string]string{}
				s.l.Range(func(l labels.Label) {
					if l.Value != "" {
						metric[l.Name] = l.Value
					}
				})
				var vs []float64
				var ts []int64
				for m := m0; m < m0+60 && m <= minutes; m++ {
					vs, ts = append(vs, s.v(m)), append(ts, start.Add(time.Duration(m)*step).UnixMilli())
				}
				b, _ := json.Marshal(map[string]any{"metric": metric, "values": vs, "timestamps": ts})
				if _, err := w.Write(append(b, '\n')); err != nil {
					pw.CloseWithError(err)
					return
				}
				samples += len(vs)
			}
			pw.CloseWithError(w.Flush())
		}()
		resp, err := http.Post(base+"/api/v1/import", "application/json", pr)
		if err != nil {
			return 0, err
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return 0, fmt.Errorf("import: %s: %s", resp.Status, msg)
		}
	}
	return samples, nil
}

// serve starts a binary on a free loopback port and waits for readyPath.
func serve(dir, name, bin, readyPath string, args func(addr string) []string) (*exec.Cmd, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, args(addr)...)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	for range 600 {
		if resp, err := http.Get(base + readyPath); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, base, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop(cmd)
	b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
	return nil, "", fmt.Errorf("%s did not start: %s", name, b)
}

func stop(cmd *exec.Cmd) { _ = cmd.Process.Kill(); _ = cmd.Wait() }

// freeAddr is a loopback address free a moment ago, for a listener the
// caller names before it starts.
func freeAddr() (string, error) {
	port, err := cluster.FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// cpuSeconds is the CPU the processes have spent (user and system).
func cpuSeconds(cmds ...*exec.Cmd) float64 {
	sum := 0.0
	for _, c := range cmds {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		sum += (ut + st) / 100 // clock ticks
	}
	return sum
}

// peakRSS is a process's peak resident memory in KiB.
func peakRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}
