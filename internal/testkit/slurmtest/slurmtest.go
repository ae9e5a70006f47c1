// Package slurmtest runs a real single-node Slurm cluster on loopback for
// tests: munged, slurmctld, slurmd and slurmrestd from the machine's
// packages (Debian's slurm-wlm, which make test installs), with the node's
// GPUs as GRES. The GRES files are placeholders, not devices: Slurm tracks
// which indices it hands each job, and nothing here touches a GPU.
package slurmtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// APIVersion is the slurmrestd API the Debian packages (Slurm 22.05) serve.
const APIVersion = "v0.0.38"

// Cluster is a running Slurm cluster of one node.
type Cluster struct {
	// Conf is the slurm.conf; commands find it through SLURM_CONF (Env).
	Conf string
	// RestSocket is slurmrestd's UNIX socket (rest_auth/local).
	RestSocket string
	// Node is the node's name, as the exporter and the jobs see it.
	Node string
	// Bin is where scontrol, squeue and the other commands are.
	Bin string
	dir string
}

// Start runs a cluster whose one node has gpus GPUs. It skips the test
// when Slurm is not installed (fails under make test).
func Start(t testing.TB, node string, gpus int) *Cluster {
	t.Helper()
	for _, cmd := range []string{"munged", "slurmctld", "slurmd", "slurmrestd"} {
		tooltest.System(t, cmd)
	}
	scontrol := tooltest.System(t, "scontrol")
	// Short paths: a UNIX socket's path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "slurm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &Cluster{Conf: filepath.Join(dir, "slurm.conf"), RestSocket: filepath.Join(dir, "rest.sock"), Node: node, Bin: filepath.Dir(scontrol), dir: dir}
	for _, d := range []string{"state", "spool", "dev", "munge"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	key := bytes.Repeat([]byte("gpureclaim-test-munge-key-"), 64)
	must(t, os.WriteFile(filepath.Join(dir, "munge", "munge.key"), key, 0o400))
	for i := range gpus {
		must(t, os.WriteFile(filepath.Join(dir, "dev", fmt.Sprintf("nvidia%d", i)), nil, 0o600))
	}
	host, err := os.Hostname()
	must(t, err)
	ctlPort, dPort := freePort(t), freePort(t)
	munge := filepath.Join(dir, "munge", "munge.sock")
	conf := fmt.Sprintf(`ClusterName=gpureclaim
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/slurmctld.log
SlurmdLogFile=%[5]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=2
GresTypes=gpu
NodeName=%[6]s NodeHostname=%[1]s NodeAddr=127.0.0.1 CPUs=16 RealMemory=1000 Gres=gpu:%[7]d State=UNKNOWN
PartitionName=gpu Nodes=%[6]s Default=YES MaxTime=INFINITE State=UP
`, host, ctlPort, dPort, munge, dir, node, gpus)
	must(t, os.WriteFile(c.Conf, []byte(conf), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "gres.conf"), fmt.Appendf(nil, "NodeName=%s Name=gpu File=%s/dev/nvidia[0-%d]\n", node, dir, gpus-1), 0o644))

	c.daemon(t, "munged", "--foreground", "--force", "--socket="+munge, "--key-file="+filepath.Join(dir, "munge", "munge.key"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munge", "seed"))
	c.wait(t, "munged", func() bool { _, err := os.Stat(munge); return err == nil })
	c.daemon(t, "slurmctld", "-D", "-f", c.Conf)
	c.wait(t, "slurmctld", func() bool { return c.Command(context.Background(), "scontrol", "ping").Run() == nil })
	c.daemon(t, "slurmd", "-D", "-f", c.Conf, "-N", node)
	c.wait(t, "the node to be idle", func() bool {
		out, err := c.Command(context.Background(), "sinfo", "-h", "-n", node, "-o", "%T").Output()
		return err == nil && strings.TrimSpace(string(out)) == "idle"
	})
	c.daemon(t, "slurmrestd", "-f", c.Conf, "-a", "rest_auth/local", "-s", "openapi/"+APIVersion, "unix:"+c.RestSocket)
	// Cleanups run last in first: this one, before the daemons stop, ends
	// every job, so no job step outlives the test.
	t.Cleanup(func() {
		_ = c.Command(context.Background(), "scancel", "--full", "--partition=gpu").Run()
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			out, err := c.Command(context.Background(), "squeue", "--noheader").Output()
			if err == nil && strings.TrimSpace(string(out)) == "" {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	c.wait(t, "slurmrestd", func() bool {
		resp, err := c.HTTPClient().Get("http://slurm/slurm/" + APIVersion + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return c
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// daemon starts a daemon in the foreground, stopped when the test ends.
func (c *Cluster) daemon(t testing.TB, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = c.Env()
	log, err := os.Create(filepath.Join(c.dir, name+".out"))
	must(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	if name == "slurmrestd" {
		// slurmrestd refuses root unless told: the tests run as root, which
		// is SlurmUser here.
		cmd.Env = append(cmd.Env, "SLURMRESTD_SECURITY=disable_user_check")
	}
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
}

func (c *Cluster) wait(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, c.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Logs are the daemons' logs, for a failure's message.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, f := range []string{"munged.out", "slurmctld.log", "slurmd.log", "slurmrestd.out"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, f))
		fmt.Fprintf(&b, "--- %s\n%s\n", f, data)
	}
	return b.String()
}

// Env is the environment Slurm's commands need to find this cluster.
func (c *Cluster) Env() []string { return append(os.Environ(), "SLURM_CONF="+c.Conf) }

// Command runs one of Slurm's commands on this cluster.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, name), args...)
	cmd.Env = c.Env()
	return cmd
}

// HTTPClient reaches slurmrestd over its UNIX socket (any host name).
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", c.RestSocket)
	}}}
}

var granted = regexp.MustCompile(`(?:Granted job allocation|Submitted batch job) (\d+)`)

// Alloc makes an interactive allocation with no shell (salloc
// --no-shell), as an idle `salloc` or `srun --pty bash` holds GPUs.
func (c *Cluster) Alloc(t testing.TB, gpus int, extra ...string) string {
	t.Helper()
	args := append([]string{"--no-shell", "-N1", fmt.Sprintf("--gres=gpu:%d", gpus)}, extra...)
	return c.jobID(t, "salloc", args...)
}

// Batch submits a batch job that sleeps, as a job stuck before its CUDA
// process starts does.
func (c *Cluster) Batch(t testing.TB, gpus int, extra ...string) string {
	t.Helper()
	args := append([]string{"-N1", fmt.Sprintf("--gres=gpu:%d", gpus), "-o", "/dev/null", "--wrap", "sleep 3600"}, extra...)
	return c.jobID(t, "sbatch", args...)
}

func (c *Cluster) jobID(t testing.TB, cmd string, args ...string) string {
	t.Helper()
	out, err := c.Command(context.Background(), cmd, args...).CombinedOutput()
	m := granted.FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%s %v: %v: %s\n%s", cmd, args, err, out, c.Logs())
	}
	id := string(m[1])
	c.wait(t, "job "+id+" to run", func() bool { return c.State(t, id) == "RUNNING" })
	return id
}

// State is a job's state as squeue (or, once it ended, scontrol) says.
func (c *Cluster) State(t testing.TB, id string) string {
	out, err := c.Command(context.Background(), "scontrol", "-o", "show", "job", id).Output()
	if err != nil {
		return ""
	}
	m := regexp.MustCompile(`JobState=(\S+)`).FindSubmatch(out)
	if m == nil {
		return ""
	}
	return string(m[1])
}
