package slurm_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/slurmtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/slurm"
)

var ctx = context.Background()

// Against a real slurmrestd (Slurm 22.05, rest_auth/local on its socket).
func TestClientOnARealSlurm(t *testing.T) {
	c := slurmtest.Start(t, "gpu-node-1", 8)
	cl, err := slurm.New(config.Slurm{URL: "unix://" + c.RestSocket, APIVersion: slurmtest.APIVersion, Timeout: config.Duration(10 * time.Second), Scontrol: filepath.Join(c.Bin, "scontrol")})
	require.NoError(t, err)

	alloc := c.Alloc(t, 2)
	kept := c.Batch(t, 1, "--requeue", "--comment=gpureclaim:keep")

	j, err := cl.Job(ctx, alloc)
	require.NoError(t, err)
	require.Equal(t, "RUNNING", j.State)
	require.True(t, j.Running())
	require.False(t, j.Batch)
	require.Equal(t, "root", j.User)
	require.Equal(t, "gpu", j.Partition)
	require.WithinDuration(t, time.Now(), j.Start, time.Minute)
	require.False(t, j.Kept())

	k, err := cl.Job(ctx, kept)
	require.NoError(t, err)
	require.True(t, k.Batch)
	require.True(t, k.Requeue)
	require.True(t, k.Kept())

	require.NoError(t, cl.Cancel(ctx, alloc))
	require.Eventually(t, func() bool { return c.State(t, alloc) == "CANCELLED" }, 10*time.Second, 100*time.Millisecond, c.Logs())
	require.ErrorIs(t, cl.Cancel(ctx, alloc), reclaim.ErrGone, "a job cancelled before is gone")
	require.Equal(t, "RUNNING", c.State(t, kept), "the other job runs on")

	// Requeue: a requeue-able batch job is requeued, anything else cancelled.
	cl.Env = c.Env()
	again := c.Batch(t, 1, "--requeue")
	once := c.Batch(t, 1, "--no-requeue")
	inter := c.Alloc(t, 1)
	detail, err := cl.Requeue(ctx, again)
	require.NoError(t, err, c.Logs())
	require.Equal(t, "Slurm job "+again+" requeued", detail)
	require.Eventually(t, func() bool { return restarts(t, c, again) == "1" }, 10*time.Second, 100*time.Millisecond, "Slurm requeued it")
	detail, err = cl.Requeue(ctx, once)
	require.NoError(t, err)
	require.Equal(t, "Slurm job "+once+" cancelled: not requeue-able (--no-requeue)", detail)
	detail, err = cl.Requeue(ctx, inter)
	require.NoError(t, err)
	require.Equal(t, "Slurm job "+inter+" cancelled: an interactive allocation", detail)
	require.Eventually(t, func() bool { return c.State(t, once) == "CANCELLED" && c.State(t, inter) == "CANCELLED" }, 10*time.Second, 100*time.Millisecond)

	_, err = cl.Job(ctx, "999999")
	require.ErrorIs(t, err, reclaim.ErrGone)
	_, err = cl.Job(ctx, "1;rm")
	require.ErrorContains(t, err, "is not a Slurm job id")
}

// Over the network slurmrestd takes a JWT; its answers from v0.0.40 on
// carry numbers as {set, number} and the state as a list.
func TestClientWithATokenAndTheNewerSchema(t *testing.T) {
	var user, token string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, token = r.Header.Get("X-SLURM-USER-NAME"), r.Header.Get("X-SLURM-USER-TOKEN")
		switch {
		case r.URL.Path == "/slurm/v0.0.42/job/7" && r.Method == http.MethodGet:
			_, _ = w.Write([]byte(`{"jobs":[{"job_id":7,"user_name":"alice","partition":"gpu","comment":{"job":"gpureclaim:keep"},"job_state":["RUNNING"],"start_time":{"set":true,"infinite":false,"number":1796126657},"batch_flag":true,"requeue":false}],"errors":[]}`))
		case r.URL.Path == "/slurm/v0.0.42/job/8":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"jobs":[],"errors":[{"error_number":1,"error":"Unspecified error","description":"slurmctld is down"}]}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"errors":[{"error":"authentication failed"}]}`))
		}
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "jwt")
	require.NoError(t, os.WriteFile(tokenFile, []byte("jwt\n"), 0o600))
	cl, err := slurm.New(config.Slurm{URL: srv.URL, APIVersion: "v0.0.42", UserName: "gpureclaim", TokenFile: tokenFile, Timeout: config.Duration(5 * time.Second)})
	require.NoError(t, err)
	j, err := cl.Job(ctx, "7")
	require.NoError(t, err)
	require.Equal(t, "gpureclaim", user)
	require.Equal(t, "jwt", token)
	require.NoError(t, os.WriteFile(tokenFile, []byte("jwt-renewed\n"), 0o600))
	_, err = cl.Job(ctx, "7")
	require.NoError(t, err)
	require.Equal(t, "jwt-renewed", token, "a token renewed in its file is sent at the next call")
	require.Equal(t, time.Unix(1796126657, 0), j.Start)
	require.True(t, j.Kept())
	require.True(t, j.Running())
	require.True(t, j.Batch)

	_, err = cl.Job(ctx, "8")
	var retry *reclaim.RetryError
	require.ErrorAs(t, err, &retry, "a 5xx is tried again")
	_, err = cl.Job(ctx, "9")
	require.ErrorContains(t, err, "refused the reclaimer")
}

func restarts(t *testing.T, c *slurmtest.Cluster, id string) string {
	out, err := c.Command(ctx, "scontrol", "-o", "show", "job", id).Output()
	if err != nil {
		return ""
	}
	_, after, ok := strings.Cut(string(out), " Restarts=")
	if !ok {
		return ""
	}
	n, _, _ := strings.Cut(after, " ")
	return n
}

// slurmrestd behind a private CA, and behind mutual TLS.
func TestTLS(t *testing.T) {
	rest := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"jobs":[{"job_id":7,"user_name":"alice","job_state":["RUNNING"]}],"errors":[]}`))
	})
	tlstest.Check(t, rest, func(t *testing.T, url string, hc config.HTTPClient) error {
		cl, err := slurm.New(config.Slurm{URL: url, APIVersion: "v0.0.42", HTTP: hc, Timeout: config.Duration(5 * time.Second)})
		require.NoError(t, err)
		_, err = cl.Job(ctx, "7")
		return err
	})
}
