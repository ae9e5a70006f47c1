package procfs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseCgroup(t *testing.T) {
	cid := "3f1c2b5a9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a"
	for _, tc := range []struct {
		name, in                   string
		podUID, containerID, slurm string
	}{
		{"v2 systemd burstable", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-" + cid + ".scope\n",
			"1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", cid, ""},
		{"v2 systemd guaranteed crio", "0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-" + cid + ".scope",
			"1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", cid, ""},
		{"v1 cgroupfs", "12:memory:/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/" + cid + "\n11:devices:/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/" + cid,
			"1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901", cid, ""},
		{"slurm v2", "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0", "", "", "4242"},
		{"slurm v1", "4:devices:/slurm/uid_1000/job_77/step_batch/task_0", "", "", "77"},
		{"bare metal", "0::/user.slice/user-1000.slice/session-3.scope", "", "", ""},
		{"empty", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, c, job := ParseCgroup(tc.in)
			require.Equal(t, tc.podUID, pod)
			require.Equal(t, tc.containerID, c)
			require.Equal(t, tc.slurm, job)
		})
	}
}

func TestProcess(t *testing.T) {
	root := t.TempDir()
	write := func(path, body string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	}
	write(filepath.Join(root, "stat"), "cpu 1 2 3\nbtime 1700000000\n")
	write(filepath.Join(root, "42", "status"), "Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\n")
	write(filepath.Join(root, "42", "cgroup"), "0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0\n")
	// a comm with spaces and parentheses must not shift the fields
	write(filepath.Join(root, "42", "stat"), "42 (my (odd) prog) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n")
	passwd := filepath.Join(root, "passwd")
	write(passwd, "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n")

	fs := New(root, passwd)
	p, err := fs.Process(42)
	require.NoError(t, err)
	require.Equal(t, "python3", p.Name)
	require.Equal(t, 1000, p.UID)
	require.Equal(t, "alice", p.User)
	require.Equal(t, "9", p.SlurmJob)
	require.Equal(t, time.Unix(1700000000, 0).UTC().Add(123450*time.Millisecond), p.StartTime)

	_, err = fs.Process(43)
	require.ErrorIs(t, err, ErrNoProcess)

	// an unknown uid stays numeric rather than failing
	write(filepath.Join(root, "44", "status"), "Name:\tx\nUid:\t2001\t2001\t2001\t2001\n")
	p, err = fs.Process(44)
	require.NoError(t, err)
	require.Equal(t, "2001", p.User)
}
