// Package jupyterhub stops and starts single-user servers through
// JupyterHub's REST API, as the hub's own idle culler does: the hub then
// deletes the server's pod and records the server as stopped, so nothing
// starts it again until its user does (or a restore).
package jupyterhub

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Pod metadata KubeSpawner writes on a single-user server's pod.
const (
	ComponentLabel  = "component"
	ServerComponent = "singleuser-server"
	UserKey         = "hub.jupyter.org/username"
	ServerKey       = "hub.jupyter.org/servername"
)

// Client calls one hub's API.
type Client struct {
	base string
	http *http.Client
}

// New returns a client of the hub API at the config's URL (…/hub/api),
// authenticated as its HTTP client says, with a token that has the
// admin:servers scope.
func New(c config.JupyterHub) (*Client, error) {
	hc, err := config.NewHTTPClient(c.HTTP, "jupyterhub", time.Duration(c.Timeout))
	if err != nil {
		return nil, err
	}
	return &Client{base: strings.TrimRight(c.URL, "/"), http: hc}, nil
}

// serverPath is the route of a user's default server or of a named one.
func serverPath(user, server string) string {
	if server == "" {
		return "/users/" + url.PathEscape(user) + "/server"
	}
	return "/users/" + url.PathEscape(user) + "/servers/" + url.PathEscape(server)
}

// Stop asks the hub to stop a server. A server already stopped (or a
// user the hub no longer has) is reclaim.ErrGone; the hub's own answer
// that the stop is under way (202) counts as done.
func (c *Client) Stop(ctx context.Context, user, server string) error {
	status, body, err := c.call(ctx, http.MethodDelete, serverPath(user, server))
	switch {
	case err != nil:
		return &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("stopping the JupyterHub server of %s: %w", user, err)}
	case status == http.StatusNoContent || status == http.StatusAccepted:
		return nil
	case status == http.StatusNotFound:
		return reclaim.ErrGone
	case status == http.StatusBadRequest && strings.Contains(body, "not running"):
		return reclaim.ErrGone
	case status >= 500 || status == http.StatusTooManyRequests:
		return &reclaim.RetryError{After: 30 * time.Second, Err: fmt.Errorf("stopping the JupyterHub server of %s: hub answered %d: %s", user, status, body)}
	}
	return fmt.Errorf("stopping the JupyterHub server of %s: hub answered %d: %s", user, status, body)
}

// Start asks the hub to start a server again, with the options it last had.
func (c *Client) Start(ctx context.Context, user, server string) error {
	status, body, err := c.call(ctx, http.MethodPost, serverPath(user, server))
	switch {
	case err != nil:
		return fmt.Errorf("starting the JupyterHub server of %s: %w", user, err)
	case status == http.StatusCreated || status == http.StatusAccepted:
		return nil
	case status == http.StatusBadRequest && strings.Contains(body, "already running"):
		return nil
	}
	return fmt.Errorf("starting the JupyterHub server of %s: hub answered %d: %s", user, status, body)
}

func (c *Client) call(ctx context.Context, method, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}
