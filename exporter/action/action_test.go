package action_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/action"
	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/exporter/sampler/samplertest"
	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

const token = "s3cret"

// spawn starts a real process the test owns; it is reaped when it ends.
func spawn(t *testing.T, script string) *exec.Cmd {
	cmd := exec.Command("sh", "-c", script)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

// spawnStubborn starts a shell that ignores SIGTERM, and returns once the
// trap is set: a SIGTERM that came before it would end the shell at once.
func spawnStubborn(t *testing.T) *exec.Cmd {
	cmd := exec.Command("sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`)
	out, w, err := os.Pipe() // not StdoutPipe: Wait, run at once below, would close it under the read
	require.NoError(t, err)
	cmd.Stdout = w
	require.NoError(t, cmd.Start())
	w.Close()
	defer out.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return cmd
}

type node struct {
	*samplertest.Node
	srv  *httptest.Server
	reg  *prometheus.Registry
	proc *procfs.FS
}

// start runs a simulated node whose GPU 0 holds the given real processes,
// read through the real /proc, with the action endpoint in front.
func start(t *testing.T, smActive float64, pids ...int) *node {
	return startGrace(t, 300*time.Millisecond, smActive, pids...)
}

// startGrace is start with the given kill grace.
func startGrace(t *testing.T, grace time.Duration, smActive float64, pids ...int) *node {
	var procs []string
	for _, p := range pids {
		procs = append(procs, fmt.Sprintf("{pid: %d, memory_used: 1GiB}", p))
	}
	sc := samplertest.Scenario(t, fmt.Sprintf("node: n1\nsystem: dgxh100\ngpus:\n  - {index: 0, sm_active: %g, processes: [%s]}\n", smActive, strings.Join(procs, ", ")))
	real := procfs.New("/proc", "/etc/passwd")
	hist := action.NewHistory(time.Minute)
	n := samplertest.Start(t, sc, func(s *nvmlsim.Sim) sampler.Config {
		return sampler.Config{NVML: s, Proc: real, OnSample: hist.Record}
	})
	reg := prometheus.NewRegistry()
	h := action.New(action.Config{Token: token, Grace: grace, IdleWindow: time.Minute, IdleThreshold: 0.05, ExemptUsers: []string{"nobody"}, Clock: n.Clock.Now},
		n.Sampler, hist, action.OS{Proc: real}, reg)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &node{Node: n, srv: srv, reg: reg, proc: real}
}

// history samples the node over the idle window.
func (n *node) history(t *testing.T) {
	for s := 0; s <= 60; s += 15 {
		n.Clock.Set(samplertest.T0.Add(time.Duration(s) * time.Second))
		n.Sampler.Sample(t.Context())
	}
}

func (n *node) uuid() string { return n.Sampler.Latest().GPUs[0].UUID }

func (n *node) call(t *testing.T, method, path, tok string, body any) (int, nodeapi.KillResult, nodeapi.Unit) {
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, n.srv.URL+path, rd)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var raw json.RawMessage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
	var kr nodeapi.KillResult
	var u nodeapi.Unit
	_ = json.Unmarshal(raw, &kr)
	_ = json.Unmarshal(raw, &u)
	return resp.StatusCode, kr, u
}

func (n *node) unit(t *testing.T) nodeapi.Unit {
	code, _, u := n.call(t, http.MethodGet, "/api/v1/units/"+n.uuid(), token, nil)
	require.Equal(t, http.StatusOK, code)
	return u
}

func (n *node) kill(t *testing.T, procs []nodeapi.Process) (int, nodeapi.KillResult) {
	code, kr, _ := n.call(t, http.MethodPost, "/api/v1/units/"+n.uuid()+"/kill", token, nodeapi.KillRequest{Processes: procs, Reason: "GPUIdle"})
	return code, kr
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestKillsRealProcessesOnAnIdleUnit(t *testing.T) {
	polite := spawn(t, "exec sleep 300")
	stubborn := spawnStubborn(t) // ignores SIGTERM
	n := start(t, 0, polite.Process.Pid, stubborn.Process.Pid)
	n.history(t)

	u := n.unit(t)
	require.True(t, u.Idleness.Idle)
	require.Len(t, u.Processes, 2)
	for _, p := range u.Processes {
		require.False(t, p.StartTime.IsZero(), "start times from the real /proc")
	}

	code, res := n.kill(t, u.Processes)
	require.Equal(t, http.StatusOK, code, res.Error)
	require.ElementsMatch(t, []int{polite.Process.Pid, stubborn.Process.Pid}, res.Killed)
	require.Eventually(t, func() bool {
		st1, _ := n.proc.State(polite.Process.Pid)
		st2, _ := n.proc.State(stubborn.Process.Pid)
		return (st1 == 0 || st1 == 'Z') && (st2 == 0 || st2 == 'Z')
	}, 5*time.Second, 20*time.Millisecond, "SIGTERM ends one, SIGKILL after the grace the other")

	// The same request again does nothing twice: the processes are gone.
	code, res = n.kill(t, u.Processes)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, res.Killed)
	require.ElementsMatch(t, []int{polite.Process.Pid, stubborn.Process.Pid}, res.Gone)
	require.Equal(t, 1.0, testutil.ToFloat64(mustCounter(t, n.reg, "killed")))
	require.Equal(t, 1.0, testutil.ToFloat64(mustCounter(t, n.reg, "gone")))
}

func mustCounter(t *testing.T, reg *prometheus.Registry, result string) prometheus.Collector {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetValue() == result {
					return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x"}, func() float64 { return m.Counter.GetValue() })
				}
			}
		}
	}
	t.Fatalf("no %s result", result)
	return nil
}

func TestRefusals(t *testing.T) {
	p := spawn(t, "exec sleep 300")
	other := spawn(t, "exec sleep 300")
	n := start(t, 0, p.Process.Pid, other.Process.Pid)
	n.history(t)
	procs := n.unit(t).Processes
	mine := []nodeapi.Process{procs[0]}
	for _, q := range procs {
		if q.PID == p.Process.Pid {
			mine = []nodeapi.Process{q}
		}
	}
	wrongStart := mine[0]
	wrongStart.StartTime = wrongStart.StartTime.Add(-time.Hour)

	for _, tc := range []struct {
		name string
		req  []nodeapi.Process
		code int
		want string
	}{
		{"pid 1", []nodeapi.Process{{PID: 1}}, http.StatusConflict, "pid 1 is never signalled"},
		{"a reused pid", []nodeapi.Process{wrongStart, other0(procs, p.Process.Pid)}, http.StatusConflict, "another process"},
		{"a process the request does not name", mine, http.StatusConflict, "the unit has a process the request does not name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, res := n.kill(t, tc.req)
			require.Equal(t, tc.code, code, res.Error)
			require.Contains(t, res.Error, tc.want)
		})
	}
	require.True(t, alive(p.Process.Pid), "nothing was signalled")
	require.True(t, alive(other.Process.Pid))
}

func other0(procs []nodeapi.Process, not int) nodeapi.Process {
	for _, q := range procs {
		if q.PID != not {
			return q
		}
	}
	return nodeapi.Process{}
}

func TestRefusesABusyUnitAndAnUnknownHistory(t *testing.T) {
	p := spawn(t, "exec sleep 300")
	n := start(t, 0.5, p.Process.Pid)
	n.Clock.Set(samplertest.T0)
	n.Sampler.Sample(t.Context())
	procs := n.unit(t).Processes
	code, res := n.kill(t, procs)
	require.Equal(t, http.StatusServiceUnavailable, code, "too little history: try later")
	require.Contains(t, res.Error, "does not cover")

	n.history(t)
	code, res = n.kill(t, procs)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, res.Error, "is busy: activity reached 50.0%")
	require.True(t, alive(p.Process.Pid))
}

func TestBadRequests(t *testing.T) {
	p := spawn(t, "exec sleep 300")
	n := start(t, 0, p.Process.Pid)
	n.history(t)
	path := "/api/v1/units/" + n.uuid() + "/kill"
	for _, tc := range []struct {
		name, method, path, tok string
		body                    any
		code                    int
	}{
		{"no token", http.MethodPost, path, "", `{"processes":[{"pid":5}]}`, http.StatusUnauthorized},
		{"wrong token", http.MethodPost, path, "guess", `{"processes":[{"pid":5}]}`, http.StatusUnauthorized},
		{"malformed", http.MethodPost, path, token, `{"processes":`, http.StatusBadRequest},
		{"unknown field", http.MethodPost, path, token, `{"processes":[{"pid":5}],"force":true}`, http.StatusBadRequest},
		{"empty", http.MethodPost, path, token, `{"processes":[]}`, http.StatusBadRequest},
		{"oversized", http.MethodPost, path, token, `{"reason":"` + strings.Repeat("x", 70<<10) + `"}`, http.StatusRequestEntityTooLarge},
		{"unknown unit", http.MethodPost, "/api/v1/units/GPU-nope/kill", token, `{"processes":[{"pid":5}]}`, http.StatusNotFound},
		{"wrong method", http.MethodGet, path, token, nil, http.StatusMethodNotAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, _ := n.call(t, tc.method, tc.path, tc.tok, tc.body)
			require.Equal(t, tc.code, code)
		})
	}
	require.True(t, alive(p.Process.Pid))
}

func TestExemptUserIsNeverSignalled(t *testing.T) {
	// As root, run the process as nobody; the endpoint's exempt user.
	if syscall.Getuid() != 0 {
		t.Skip("needs root to start a process as another user")
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	n := start(t, 0, cmd.Process.Pid)
	n.history(t)
	code, res := n.kill(t, n.unit(t).Processes)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, res.Error, "belongs to user nobody, who is exempt")
	require.True(t, alive(cmd.Process.Pid))
}

// A process that NVML lists and this node's /proc cannot show (another PID
// namespace) is never signalled: its PID may name another process here, or
// none, so the node can neither check it nor tell that it exited.
func TestRefusesAProcessItCannotCheck(t *testing.T) {
	p := spawn(t, "exec sleep 300")
	const unseen = 4194001 // no such process here
	n := start(t, 0, p.Process.Pid, unseen)
	n.history(t)
	code, res := n.kill(t, n.unit(t).Processes)
	require.Equal(t, http.StatusConflict, code, res.Error)
	require.Contains(t, res.Error, "pid 4194001 on the unit cannot be checked in this node's /proc")
	require.True(t, alive(p.Process.Pid), "nothing was signalled")
}

// A kill asked for while another is under way on the unit (a client's
// retry during the grace) is busy, not refused: 503 with Retry-After, so
// the reclaimer waits rather than cancels.
func TestBusyWhileAKillRuns(t *testing.T) {
	stubborn := spawnStubborn(t) // the kill takes the whole grace
	// A grace long enough that the two requests overlap however loaded the machine.
	n := startGrace(t, 3*time.Second, 0, stubborn.Process.Pid)
	n.history(t)
	body, _ := json.Marshal(nodeapi.KillRequest{Processes: n.unit(t).Processes, Reason: "GPUIdle"})
	type answer struct {
		code       int
		retryAfter string
	}
	answers := make(chan answer, 2)
	for range 2 { // the request and a retry of it, at once
		go func() {
			req, _ := http.NewRequest(http.MethodPost, n.srv.URL+"/api/v1/units/"+n.uuid()+"/kill", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	got := []answer{<-answers, <-answers}
	require.ElementsMatch(t, []answer{{http.StatusOK, ""}, {http.StatusServiceUnavailable, "4"}}, got, "one kills, the other is told to come back after the grace")
}

// A kill carrying an older term of a Lease than one already seen comes
// from a reclaimer replica that lost it: refused, nothing signalled. The
// terms of another Lease (another reclaimer, or the Lease made anew) are
// their own.
func TestRefusesAnOlderFencingToken(t *testing.T) {
	p := spawn(t, "exec sleep 300")
	n := start(t, 0, p.Process.Pid)
	n.history(t)
	procs := n.unit(t).Processes
	kill := func(lease string, term int64, procs []nodeapi.Process) (int, nodeapi.KillResult) {
		code, kr, _ := n.call(t, http.MethodPost, "/api/v1/units/"+n.uuid()+"/kill", token, nodeapi.KillRequest{Processes: procs, Reason: "GPUIdle", Lease: lease, Fence: term})
		return code, kr
	}
	const lease = "gpureclaim/gpureclaim-reclaimer/0b6e1f4a"
	// The new leader's term reaches the node first.
	code, res := kill(lease, 5, []nodeapi.Process{{PID: 1}})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, res.Error, "pid 1 is never signalled")

	code, res = kill(lease, 4, procs)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, res.Error, "term 4 of Lease "+lease+" is older than 5")
	require.True(t, alive(p.Process.Pid), "nothing was signalled")

	code, res = kill("gpureclaim/gpureclaim-reclaimer/7d1c9e2b", 1, procs)
	require.Equal(t, http.StatusOK, code, "a Lease made anew starts its own terms: %s", res.Error)
	require.Equal(t, []int{p.Process.Pid}, res.Killed)
}
