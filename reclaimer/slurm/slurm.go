// Package slurm is the reclaimer's client of slurmrestd: it reads a job
// (its start, its comment, whether it still runs) and cancels it, so that
// the job's allocation, not only its processes, gives the GPUs back.
//
// Two calls, GET and DELETE /slurm/{version}/job/{id}, which every OpenAPI
// plugin version from v0.0.38 (Slurm 22.05) on serves; the fields read
// changed shape in v0.0.40 (numbers became {set, number} objects, the
// state a list), and both are read.
package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// KeepMarker in a job's comment keeps it (the exporter reads the same).
const KeepMarker = "gpureclaim:keep"

// Client talks to one slurmrestd, and runs scontrol for a requeue.
type Client struct {
	base, version string
	http          *http.Client
	scontrol      string
	timeout       time.Duration
	// Env is scontrol's environment (SLURM_CONF in tests); nil: the reclaimer's.
	Env []string
}

// New builds a client from the config's slurm section.
func New(c config.Slurm) (*Client, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, err
	}
	cl := &Client{version: c.APIVersion, scontrol: c.Scontrol, timeout: time.Duration(c.Timeout)}
	h := c.HTTP
	var opts []promconfig.HTTPClientOption
	if u.Scheme == "unix" {
		socket := u.Path
		opts = append(opts, promconfig.WithDialContextFunc(func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}))
		cl.base = "http://slurmrestd"
	} else {
		cl.base = strings.TrimRight(c.URL, "/")
	}
	if c.TokenFile != "" {
		// rest_auth/jwt reads the user and the token from its own headers;
		// the token is read from its file at every call.
		h.HTTPHeaders = &promconfig.Headers{Headers: map[string]promconfig.Header{
			"X-SLURM-USER-NAME":  {Values: []string{c.UserName}},
			"X-SLURM-USER-TOKEN": {Files: []string{c.TokenFile}},
		}}
	}
	if cl.http, err = config.NewHTTPClient(h, "slurm", time.Duration(c.Timeout), opts...); err != nil {
		return nil, err
	}
	return cl, nil
}

// Job is what the reclaimer needs of a job.
type Job struct {
	ID, User, Partition, Comment string
	State                        string
	Start                        time.Time
	Batch, Requeue               bool
}

// Kept says whether the job's comment keeps it.
func (j Job) Kept() bool { return strings.Contains(j.Comment, KeepMarker) }

// Running says whether the job still holds its allocation.
func (j Job) Running() bool {
	switch j.State {
	case "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "PENDING", "REQUEUED", "RESIZING":
		return true
	}
	return false
}

// number reads a v0.0.38 number or a v0.0.40+ {set, infinite, number}.
type number struct {
	V   float64
	Set bool
}

func (n *number) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			Set      bool    `json:"set"`
			Infinite bool    `json:"infinite"`
			Number   float64 `json:"number"`
		}
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		n.V, n.Set = o.Number, o.Set && !o.Infinite
		return nil
	}
	if err := json.Unmarshal(b, &n.V); err != nil {
		return err
	}
	n.Set = true
	return nil
}

// state reads a v0.0.38 string or a v0.0.40+ list of flags.
type state string

func (s *state) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		var l []string
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		if len(l) > 0 {
			*s = state(l[0])
		}
		return nil
	}
	var v string
	err := json.Unmarshal(b, &v)
	*s = state(v)
	return err
}

// answer is slurmrestd's answer to a job query.
type answer struct {
	Jobs []struct {
		JobID     number `json:"job_id"`
		UserName  string `json:"user_name"`
		Partition string `json:"partition"`
		Comment   any    `json:"comment"`
		JobState  state  `json:"job_state"`
		StartTime number `json:"start_time"`
		BatchFlag bool   `json:"batch_flag"`
		Requeue   bool   `json:"requeue"`
	} `json:"jobs"`
	Errors []struct {
		Description string `json:"description"`
		ErrorNumber int    `json:"error_number"`
		Error       string `json:"error"`
	} `json:"errors"`
}

// invalidJobID is Slurm's ESLURM_INVALID_JOB_ID: the job is gone.
const invalidJobID = 2017

func (c *Client) do(ctx context.Context, method, id string) (*answer, error) {
	if strings.TrimFunc(id, func(r rune) bool { return r >= '0' && r <= '9' || r == '_' }) != "" || id == "" {
		return nil, fmt.Errorf("%q is not a Slurm job id", id)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/slurm/"+c.version+"/job/"+id, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("slurmrestd: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("slurmrestd: %w", err)
	}
	var a answer
	if jerr := json.Unmarshal(b, &a); jerr != nil {
		return nil, fmt.Errorf("slurmrestd answered %s: %.200s", resp.Status, b)
	}
	for _, e := range a.Errors {
		if e.ErrorNumber == invalidJobID {
			return nil, reclaim.ErrGone
		}
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("slurmrestd refused the reclaimer (%s): check slurm.token_file and slurm.user_name, or the socket's user", resp.Status)
	case resp.StatusCode >= 500:
		return nil, &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("slurmrestd answered %s", resp.Status)}
	case resp.StatusCode/100 != 2 || len(a.Errors) > 0:
		msg := resp.Status
		if len(a.Errors) > 0 {
			msg = fmt.Sprintf("%s: %s", a.Errors[0].Error, a.Errors[0].Description)
		}
		return nil, fmt.Errorf("slurmrestd: %s", msg)
	}
	return &a, nil
}

// Job reads a job; reclaim.ErrGone when Slurm no longer knows it.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	a, err := c.do(ctx, http.MethodGet, id)
	if err != nil {
		return Job{}, err
	}
	if len(a.Jobs) == 0 {
		return Job{}, reclaim.ErrGone
	}
	j := a.Jobs[0]
	out := Job{ID: id, User: j.UserName, Partition: j.Partition, State: string(j.JobState), Batch: j.BatchFlag, Requeue: j.Requeue}
	if s, ok := j.Comment.(string); ok {
		out.Comment = s
	} else if m, ok := j.Comment.(map[string]any); ok { // v0.0.40+: {job, administrator, system}
		out.Comment, _ = m["job"].(string)
	}
	if j.StartTime.Set && j.StartTime.V > 0 {
		out.Start = time.Unix(int64(j.StartTime.V), 0)
	}
	return out, nil
}

// Cancel cancels a running job as scancel does: its processes get SIGTERM,
// then SIGKILL after the cluster's KillWait, and its allocation ends.
// reclaim.ErrGone when it had already ended.
func (c *Client) Cancel(ctx context.Context, id string) error {
	j, err := c.Job(ctx, id)
	if err != nil {
		return err
	}
	if !j.Running() {
		return reclaim.ErrGone
	}
	_, err = c.do(ctx, http.MethodDelete, id)
	return err
}

// Requeue requeues a requeue-able batch job: Slurm ends it and queues it
// again, so its GPUs go back to the queue and its work starts over when
// they are free. Any other job is cancelled. It says what it did.
//
// slurmrestd gained a requeue only in Slurm 26.05; through 25.11 Slurm
// requeues by its RPC, which scontrol sends: the reclaimer's host needs
// Slurm's client and munge, as an administrator's login node has.
func (c *Client) Requeue(ctx context.Context, id string) (string, error) {
	j, err := c.Job(ctx, id)
	if err != nil {
		return "", err
	}
	if !j.Running() {
		return "", reclaim.ErrGone
	}
	if !j.Batch || !j.Requeue {
		why := "an interactive allocation"
		if j.Batch {
			why = "not requeue-able (--no-requeue)"
		}
		if _, err := c.do(ctx, http.MethodDelete, id); err != nil {
			return "", err
		}
		return "Slurm job " + id + " cancelled: " + why, nil
	}
	scontrol := c.scontrol
	if scontrol == "" {
		scontrol = "scontrol"
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, scontrol, "requeue", id)
	cmd.Env = c.Env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("scontrol requeue %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return "Slurm job " + id + " requeued", nil
}

// Holds says whether a job still holds its GPUs: it runs, starts, ends
// (its epilog runs) or is suspended with its allocation.
func (j Job) Holds() bool {
	switch j.State {
	case "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "RESIZING":
		return true
	}
	return false
}

// Released says whether a cancelled or requeued job has left its GPUs.
func (c *Client) Released(ctx context.Context, id string) (reclaim.Release, error) {
	j, err := c.Job(ctx, id)
	if errors.Is(err, reclaim.ErrGone) {
		return reclaim.Release{Done: true}, nil
	}
	if err != nil {
		return reclaim.Release{}, err
	}
	if j.Holds() {
		return reclaim.Release{Why: fmt.Sprintf("Slurm job %s is still %s", id, j.State)}, nil
	}
	return reclaim.Release{Done: true}, nil
}
