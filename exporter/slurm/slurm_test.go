package slurm_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/exporter/slurm"
	"github.com/gpureclaim/gpureclaim/internal/testkit/slurmtest"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, line, node string
		want             []int
		user             string
		keep, batch      bool
	}{
		{name: "an interactive allocation", node: "gpu-node-1", user: "alice", want: []int{0, 1},
			line: "JobId=7 JobName=interactive UserId=alice(1001) GroupId=alice(1001) Priority=1 JobState=RUNNING BatchFlag=0 Requeue=1 StartTime=2026-12-01T12:04:17 Partition=gpu NodeList=gpu-node-1 Nodes=gpu-node-1 CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1) Comment= TresPerNode=gres:gpu:2"},
		{name: "a typed GRES on two nodes, this one second", node: "gpu-node-2", user: "bob", batch: true, want: []int{4, 6, 7},
			line: "JobId=8 UserId=bob(1002) BatchFlag=1 Requeue=0 StartTime=2026-12-01T10:00:00 Partition=long Nodes=gpu-node-1 CPU_IDs=0-1 Mem=0 GRES=gpu:a100:2(IDX:0-1) Nodes=gpu-node-[2-3] CPU_IDs=0-1 Mem=0 GRES=gpu:a100:3(IDX:4,6-7)"},
		{name: "the job is on other nodes", node: "gpu-node-9",
			line: "JobId=9 UserId=bob(1002) Nodes=gpu-node-[1-3] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)"},
		{name: "no GPU", node: "n1",
			line: "JobId=10 UserId=carol(1003) Nodes=n1 CPU_IDs=0 Mem=0 GRES="},
		{name: "kept by its comment, which cannot forge the fields before it", node: "n1", user: "dave", keep: true, want: []int{3},
			line: "JobId=11 UserId=dave(1004) Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3) Comment=please gpureclaim:keep UserId=root Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7) StdOut=/dev/null"},
		{name: "a comment that mimics the fields after it forges nothing either", node: "n1", user: "dave", want: []int{3},
			line: "JobId=12 UserId=dave(1004) Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3) Comment=x StdErr=y Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7) StdErr=/dev/null StdOut=/dev/null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, ok, err := slurm.Parse(tc.line, tc.node)
			require.NoError(t, err)
			require.Equal(t, len(tc.want) > 0, ok)
			if !ok {
				return
			}
			require.Equal(t, tc.want, j.GPUs)
			require.Equal(t, tc.user, j.User)
			require.Equal(t, tc.keep, j.Keep)
			require.Equal(t, tc.batch, j.Batch)
		})
	}
	_, _, err := slurm.Parse("no job here", "n1")
	require.ErrorContains(t, err, "no JobId")
}

// On a real Slurm: an idle interactive allocation holds GPUs with no
// process, a requeue-able batch job too; the reader sees both, by index.
func TestJobsOnARealSlurm(t *testing.T) {
	c := slurmtest.Start(t, "gpu-node-1", 8)
	alloc := c.Alloc(t, 2)
	batch := c.Batch(t, 1, "--requeue", "--comment=gpureclaim:keep")
	r := &slurm.Reader{Node: c.Node, Bin: c.Bin, Env: c.Env()}
	jobs, err := r.Jobs(context.Background())
	require.NoError(t, err, c.Logs())
	require.Len(t, jobs, 2)
	byID := map[string]slurm.Job{jobs[0].ID: jobs[0], jobs[1].ID: jobs[1]}
	require.Equal(t, []int{0, 1}, byID[alloc].GPUs)
	require.False(t, byID[alloc].Batch)
	require.Equal(t, "root", byID[alloc].User)
	require.Equal(t, "gpu", byID[alloc].Partition)
	require.False(t, byID[alloc].Start.IsZero())
	require.Equal(t, []int{2}, byID[batch].GPUs)
	require.True(t, byID[batch].Batch)
	require.True(t, byID[batch].Requeue)
	require.True(t, byID[batch].Keep)

	// Pending: 4 GPUs on one node, 1 on each of two nodes (this cluster
	// has one: it waits for good), 3 per job, and one asking for none.
	for _, a := range [][]string{{"-N1", "--gres=gpu:4"}, {"-N2", "--gres=gpu:1"}, {"--gpus=3"}, {"-N1"}} {
		out, err := c.Command(context.Background(), "sbatch", append(a, "-o", "/dev/null", "--wrap", "sleep 3600")...).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	pending, err := r.PendingGPUs(context.Background())
	require.NoError(t, err)
	require.Equal(t, 4+2+3, pending)

	other := &slurm.Reader{Node: "gpu-node-7", Bin: c.Bin, Env: c.Env()}
	_, err = other.Jobs(context.Background())
	require.ErrorContains(t, err, "Invalid node name gpu-node-7", "a node name Slurm does not know is an error, not an empty node")
}
