// Package slurm reads which Slurm jobs hold this node's GPUs by allocation,
// whether or not a process runs: the GRES indices slurmctld gave each job
// (`scontrol -d show job`: GRES=gpu:2(IDX:0-1)). That record is kept by
// slurmctld itself and has had this form across Slurm releases, with or
// without cgroups, v1 or v2; a job's device cgroup exists only under
// task/cgroup and its layout changed with cgroup v2, and slurmrestd would
// need a token on every node.
package slurm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// KeepMarker in a job's comment (sbatch --comment) keeps its GPUs from
// being reclaimed, as the pod label does for a pod.
const KeepMarker = "gpureclaim:keep"

// Job is a running job with GPUs on this node.
type Job struct {
	ID, User, Partition string
	Start               time.Time
	// Batch is a batch job (sbatch); others are interactive allocations.
	Batch bool
	// Requeue says Slurm may requeue it (--requeue, or the cluster's default).
	Requeue bool
	// Keep is set when the job's comment carries KeepMarker.
	Keep bool
	// GPUs are the GPU indices the job holds on this node.
	GPUs []int
}

// Reader runs Slurm's commands on the node.
type Reader struct {
	// Node is this node's Slurm NodeName.
	Node string
	// Bin is where squeue and scontrol are; empty: the PATH.
	Bin     string
	Timeout time.Duration
	// Env, when set, is the commands' environment (SLURM_CONF in tests).
	Env []string
}

func (r *Reader) command(ctx context.Context, name string, args ...string) ([]byte, error) {
	if r.Bin != "" {
		name = filepath.Join(r.Bin, name)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = r.Env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", filepath.Base(name), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (r *Reader) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return 10 * time.Second
}

// Jobs lists the running jobs that hold GPUs on the node.
func (r *Reader) Jobs(ctx context.Context) ([]Job, error) {
	ids, err := r.command(ctx, "squeue", "--noheader", "--nodelist="+r.Node, "--states=RUNNING", "--format=%A")
	if err != nil {
		return nil, err
	}
	var jobs []Job
	for _, id := range strings.Fields(string(ids)) {
		out, err := r.command(ctx, "scontrol", "--details", "--oneliner", "show", "job", id)
		if err != nil {
			return nil, err
		}
		for _, line := range lines(out) {
			j, ok, err := Parse(line, r.Node)
			if err != nil {
				return nil, fmt.Errorf("job %s: %w", id, err)
			}
			if ok {
				jobs = append(jobs, j)
			}
		}
	}
	return jobs, nil
}

// PendingGPUs counts the GPUs Slurm's pending jobs ask for, cluster-wide:
// per node (--gres=gpu:N, --gpus-per-node) times their nodes, and per job
// (--gpus). Every node's exporter reads the same queue.
func (r *Reader) PendingGPUs(ctx context.Context) (int, error) {
	out, err := r.command(ctx, "squeue", "--noheader", "--all", "--states=PENDING", "--Format=tres-per-node:|,tres-per-job:|,numnodes:|")
	if err != nil {
		return 0, err
	}
	total := 0
	for _, l := range lines(out) {
		f := strings.Split(l, "|")
		if len(f) < 3 {
			return 0, fmt.Errorf("squeue: unexpected line %q", l)
		}
		nodes, err := strconv.Atoi(strings.TrimSpace(f[2]))
		if err != nil {
			nodes = 1 // not decided yet: at least one
		}
		total += gpusIn(f[0])*max(nodes, 1) + gpusIn(f[1])
	}
	return total, nil
}

// gpuTRES is a GPU count in a TRES or GRES list: gres:gpu:4,
// gres:gpu:a100:2, gres/gpu:4, gres/gpu=4.
var gpuTRES = regexp.MustCompile(`gres[:/]gpu(?::[^:,=]+)?[:=](\d+)`)

func gpusIn(tres string) int {
	n := 0
	for _, m := range gpuTRES.FindAllStringSubmatch(tres, -1) {
		v, _ := strconv.Atoi(m[1])
		n += v
	}
	return n
}

func lines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

var (
	field = regexp.MustCompile(`(?:^| )([A-Za-z_:]+)=(\S*)`)
	// One node group of --details: Nodes=n[1-2] CPU_IDs=0-3 Mem=0 GRES=gpu:a100:2(IDX:0-1)
	nodeGroup = regexp.MustCompile(`(?:^| )Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S*)`)
	gresIdx   = regexp.MustCompile(`^gpu[^()]*\(IDX:([0-9,-]+)\)`)
)

// Parse reads one line of `scontrol --details --oneliner show job`; false
// when the job holds no GPU on the node. Every field it needs comes before
// the comment, which a user writes, so nothing from " Comment=" on is read
// as a field. The job's name is free text too and comes before them: a
// name with spaces that mimics fields can still mislead the parse.
func Parse(line, node string) (Job, bool, error) {
	head, comment := line, ""
	// Everything the reader needs comes before the comment, which a user
	// writes: nothing after " Comment=" is read as a field.
	if i := strings.Index(line, " Comment="); i >= 0 {
		head, comment = line[:i], line[i+len(" Comment="):]
	}
	f := map[string]string{}
	for _, m := range field.FindAllStringSubmatch(head, -1) {
		if _, seen := f[m[1]]; !seen {
			f[m[1]] = m[2]
		}
	}
	j := Job{ID: f["JobId"], User: f["UserId"], Partition: f["Partition"], Batch: f["BatchFlag"] == "1", Requeue: f["Requeue"] == "1",
		Keep: strings.Contains(comment, KeepMarker)}
	if j.ID == "" {
		return Job{}, false, fmt.Errorf("no JobId in %q", line)
	}
	if i := strings.IndexByte(j.User, '('); i >= 0 {
		j.User = j.User[:i] // UserId=alice(1001)
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05", f["StartTime"], time.Local); err == nil {
		j.Start = t
	}
	for _, m := range nodeGroup.FindAllStringSubmatch(head, -1) {
		if !nodeIn(node, m[1]) {
			continue
		}
		for _, g := range strings.Split(m[2], ",gpu") {
			if !strings.HasPrefix(g, "gpu") {
				g = "gpu" + g
			}
			im := gresIdx.FindStringSubmatch(g)
			if im == nil {
				continue
			}
			idx, err := indices(im[1])
			if err != nil {
				return Job{}, false, fmt.Errorf("GRES %q: %w", g, err)
			}
			j.GPUs = append(j.GPUs, idx...)
		}
	}
	return j, len(j.GPUs) > 0, nil
}

// indices expands "0-1,4" into 0, 1, 4.
func indices(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad range %q", part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// nodeIn says whether a Slurm hostlist (n1, n[1-3,5], a,b) names node.
func nodeIn(node, list string) bool {
	for len(list) > 0 {
		var item string
		depth, i := 0, 0
		for ; i < len(list); i++ {
			if list[i] == '[' {
				depth++
			} else if list[i] == ']' {
				depth--
			} else if list[i] == ',' && depth == 0 {
				break
			}
		}
		item, list = list[:i], strings.TrimPrefix(list[i:], ",")
		prefix, rest, ok := strings.Cut(item, "[")
		if !ok {
			if item == node {
				return true
			}
			continue
		}
		ranges, suffix, _ := strings.Cut(rest, "]")
		if !strings.HasPrefix(node, prefix) || !strings.HasSuffix(node, suffix) {
			continue
		}
		num := strings.TrimSuffix(strings.TrimPrefix(node, prefix), suffix)
		n, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		for _, r := range strings.Split(ranges, ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			// Zero-padded ranges (n[01-10]) keep their width.
			if err1 == nil && err2 == nil && n >= a && n <= b && (len(lo) == len(num) || !strings.HasPrefix(lo, "0")) {
				return true
			}
		}
	}
	return false
}
