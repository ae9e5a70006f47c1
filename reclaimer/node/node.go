// Package node talks to the exporters' action endpoints: it lists the
// processes on a unit and asks the node to end them.
package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Client reaches the nodes of a config.
type Client struct {
	cfg config.Nodes
	hc  *http.Client
	// Fence, with two replicas, is the Lease (namespace/name/uid) and this
	// replica's term of it, which a kill carries: the node refuses an
	// older term.
	Fence func() (lease string, term int64)
	// Leading, with two replicas, says whether this replica may still act;
	// it is asked again right before a kill is sent, after the look at the
	// unit's processes (a pause there would otherwise send it late).
	Leading func() error
}

// New returns a client.
func New(cfg config.Nodes) (*Client, error) {
	hc, err := config.NewHTTPClient(cfg.HTTP, "nodes", time.Duration(cfg.Timeout))
	if err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, hc: hc}, nil
}

func (c *Client) do(ctx context.Context, method, node, path string, body, out any) (int, error) {
	code, _, err := c.doH(ctx, method, node, path, body, out)
	return code, err
}

func (c *Client) doH(ctx context.Context, method, node, path string, body, out any) (int, http.Header, error) {
	base, err := c.cfg.URL(node)
	if err != nil {
		return 0, nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, resp.Header, err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return resp.StatusCode, resp.Header, fmt.Errorf("%s %s: %d and a body that is not JSON", method, path, resp.StatusCode)
	}
	return resp.StatusCode, resp.Header, nil
}

// processes lists the target's processes on its unit: on bare metal those
// of its user (and Slurm job); otherwise all.
func (c *Client) processes(ctx context.Context, t reclaim.Target) ([]nodeapi.Process, error) {
	var u nodeapi.Unit
	code, err := c.do(ctx, http.MethodGet, t.Node, "/api/v1/units/"+url.PathEscape(t.UUID), nil, &u)
	switch {
	case err != nil:
		return nil, &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("node %s: %w", t.Node, err)}
	case code != http.StatusOK && code != http.StatusNotFound:
		return nil, &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("node %s answered %d", t.Node, code)}
	case u.Node != t.Node:
		// Gone, or these processes, only as the unit's own node says:
		// anything else answering there proves nothing.
		return nil, &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("node %s: the answer (%d) names node %q, not the unit's", t.Node, code, u.Node)}
	case code == http.StatusNotFound:
		return nil, reclaim.ErrGone
	}
	var out []nodeapi.Process
	for _, p := range u.Processes {
		if t.Pod == "" && (p.User != t.User || p.SlurmJob != t.SlurmJob) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// PIDs lists the target's processes on its unit.
func (c *Client) PIDs(ctx context.Context, t reclaim.Target) ([]int, error) {
	procs, err := c.processes(ctx, t)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(procs))
	for _, p := range procs {
		pids = append(pids, p.PID)
	}
	return pids, nil
}

// Kill ends the target's processes on its unit. The node re-checks that the
// unit is idle and the processes are these: a 409 (refused) cancels the
// reclaim, a 503 (busy, or its history too short) is retried after its
// Retry-After.
func (c *Client) Kill(ctx context.Context, r *reclaim.Reclaim) (reclaim.Result, error) {
	procs, err := c.processes(ctx, r.Target)
	if err != nil {
		return reclaim.Result{}, err
	}
	if len(procs) == 0 {
		return reclaim.Result{}, reclaim.ErrGone
	}
	if c.Leading != nil {
		if err := c.Leading(); err != nil {
			return reclaim.Result{}, fmt.Errorf("%w: no kill sent: %v", reclaim.ErrNotLeader, err)
		}
	}
	var res nodeapi.KillResult
	code, hdr, err := c.doH(ctx, http.MethodPost, r.Target.Node, "/api/v1/units/"+url.PathEscape(r.Target.UUID)+"/kill", c.killRequest(procs, r), &res)
	switch {
	case err != nil:
		return reclaim.Result{}, &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("node %s: %w", r.Target.Node, err)}
	case code == http.StatusOK && len(res.Killed) == 0:
		return reclaim.Result{}, reclaim.ErrGone
	case code == http.StatusOK:
		return reclaim.Result{Killed: res.Killed, Detail: fmt.Sprintf("node %s ended processes %v", r.Target.Node, res.Killed)}, nil
	case code == http.StatusConflict:
		return reclaim.Result{}, &reclaim.RefusedError{Reason: "node " + r.Target.Node + " refused: " + res.Error}
	case code == http.StatusNotFound:
		return reclaim.Result{}, reclaim.ErrGone
	case code == http.StatusServiceUnavailable || code >= 500:
		after := 30 * time.Second
		if s, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && s > 0 {
			after = time.Duration(s) * time.Second
		}
		return reclaim.Result{}, &reclaim.RetryError{After: after, Err: fmt.Errorf("node %s: %s", r.Target.Node, res.Error)}
	}
	return reclaim.Result{}, fmt.Errorf("node %s answered %d: %s", r.Target.Node, code, res.Error)
}

// Started is the start of the target's oldest process on its unit.
func (c *Client) Started(ctx context.Context, t reclaim.Target) (time.Time, error) {
	procs, err := c.processes(ctx, t)
	if err != nil {
		return time.Time{}, err
	}
	if len(procs) == 0 {
		return time.Time{}, reclaim.ErrGone
	}
	oldest := procs[0].StartTime
	for _, p := range procs[1:] {
		if p.StartTime.Before(oldest) {
			oldest = p.StartTime
		}
	}
	return oldest, nil
}

// Released says whether the processes a kill ended are gone from the unit.
func (c *Client) Released(ctx context.Context, r *reclaim.Reclaim) (reclaim.Release, error) {
	procs, err := c.processes(ctx, r.Target)
	if errors.Is(err, reclaim.ErrGone) {
		return reclaim.Release{Done: true}, nil
	}
	if err != nil {
		return reclaim.Release{}, err
	}
	ended := r.Killed
	if len(ended) == 0 {
		ended = r.Planned
	}
	var left []int
	for _, p := range procs {
		if len(ended) == 0 || slices.Contains(ended, p.PID) {
			left = append(left, p.PID)
		}
	}
	if len(left) == 0 {
		return reclaim.Release{Done: true}, nil
	}
	return reclaim.Release{Why: fmt.Sprintf("processes %v still run on the unit (node %s)", left, r.Target.Node)}, nil
}

func (c *Client) killRequest(procs []nodeapi.Process, r *reclaim.Reclaim) nodeapi.KillRequest {
	req := nodeapi.KillRequest{Processes: procs, Reason: r.Target.Alertname + " " + r.ID}
	if c.Fence != nil {
		req.Lease, req.Fence = c.Fence()
	}
	return req
}
