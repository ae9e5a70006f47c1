package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/node"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Each answer of the node's kill endpoint becomes the engine's outcome:
// done, gone, refused (cancel), or retry (never cancel) after Retry-After.
func TestKillOutcomes(t *testing.T) {
	proc := nodeapi.Process{PID: 4242, User: "bob", StartTime: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name       string
		code       int
		retryAfter string
		body       nodeapi.KillResult
		check      func(t *testing.T, res reclaim.Result, err error)
	}{
		{"killed", http.StatusOK, "", nodeapi.KillResult{Killed: []int{4242}}, func(t *testing.T, res reclaim.Result, err error) {
			require.NoError(t, err)
			require.Equal(t, []int{4242}, res.Killed)
		}},
		{"gone already", http.StatusOK, "", nodeapi.KillResult{Killed: []int{}, Gone: []int{4242}}, func(t *testing.T, _ reclaim.Result, err error) {
			require.ErrorIs(t, err, reclaim.ErrGone)
		}},
		{"refused", http.StatusConflict, "", nodeapi.KillResult{Error: "busy: activity reached 40%"}, func(t *testing.T, _ reclaim.Result, err error) {
			var refused *reclaim.RefusedError
			require.True(t, errors.As(err, &refused), "%v", err)
			require.Contains(t, refused.Reason, "busy: activity reached 40%")
		}},
		{"busy with another kill", http.StatusServiceUnavailable, "31", nodeapi.KillResult{Error: "another request is acting on this unit"}, func(t *testing.T, _ reclaim.Result, err error) {
			var retry *reclaim.RetryError
			require.True(t, errors.As(err, &retry), "%v", err)
			require.Equal(t, 31*time.Second, retry.After)
		}},
		{"the node fails", http.StatusInternalServerError, "", nodeapi.KillResult{Error: "oops"}, func(t *testing.T, _ reclaim.Result, err error) {
			var retry *reclaim.RetryError
			require.True(t, errors.As(err, &retry), "%v", err)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "Bearer node-token", r.Header.Get("Authorization"))
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodGet {
					_ = json.NewEncoder(w).Encode(nodeapi.Unit{UUID: "GPU-1", Node: "n1", Processes: []nodeapi.Process{proc}})
					return
				}
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.code)
				_ = json.NewEncoder(w).Encode(tc.body)
			}))
			defer srv.Close()
			c := client(t, srv.URL, withToken(t, config.DefaultHTTPClient(), "node-token"))
			res, err := c.Kill(context.Background(), &reclaim.Reclaim{ID: "r1", Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Node: "n1", User: "bob"}})
			tc.check(t, res, err)
		})
	}
}

// withToken sets a bearer token read from a file, as the config does.
func withToken(t *testing.T, hc config.HTTPClient, token string) config.HTTPClient {
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(token+"\n"), 0o600))
	hc.Authorization = &promconfig.Authorization{Type: "Bearer", CredentialsFile: path}
	return hc
}

func client(t *testing.T, url string, hc config.HTTPClient) *node.Client {
	c, err := node.New(config.Nodes{Addresses: map[string]string{"n1": url}, HTTP: hc, Timeout: config.Duration(5 * time.Second)})
	require.NoError(t, err)
	return c
}

// A node's action endpoint behind a private CA, and behind mutual TLS.
func TestTLS(t *testing.T) {
	unit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer node-token" {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(nodeapi.KillResult{Error: "unauthorized"})
			return
		}
		_ = json.NewEncoder(w).Encode(nodeapi.Unit{UUID: "GPU-1", Node: "n1"})
	})
	tlstest.Check(t, unit, func(t *testing.T, url string, hc config.HTTPClient) error {
		_, err := client(t, url, withToken(t, hc, "node-token")).PIDs(context.Background(), reclaim.Target{Node: "n1", UUID: "GPU-1", Pod: "p"})
		return err
	})
}

// No label chooses where a request and the node token go: a node name that
// is not a DNS-1123 name (a host, a port, a path, user:password@) is
// refused before any request; one not in a list of addresses too; a uuid
// reaches the path escaped; and "gone" counts only as the unit's own node
// says it.
func TestHostileLabelsReachNoOtherHost(t *testing.T) {
	var paths []string
	steal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(nodeapi.KillResult{Error: "nope"})
	}))
	defer steal.Close()
	host := strings.TrimPrefix(steal.URL, "http://")
	byTemplate, err := node.New(config.Nodes{HTTP: withToken(t, config.DefaultHTTPClient(), "node-token"), Timeout: config.Duration(5 * time.Second)})
	require.NoError(t, err)
	for _, name := range []string{host + "/steal/", "user:pw@" + host + "/", host, "N1", "n1/../x", "n1?x=1", "n1#x", ""} {
		_, err := byTemplate.PIDs(context.Background(), reclaim.Target{Node: name, UUID: "GPU-1", User: "bob"})
		require.ErrorContains(t, err, "is not a node name", name)
	}
	listed := client(t, steal.URL, withToken(t, config.DefaultHTTPClient(), "node-token"))
	_, err = listed.PIDs(context.Background(), reclaim.Target{Node: "n2", UUID: "GPU-1", User: "bob"})
	require.ErrorContains(t, err, `node "n2" is not in nodes.addresses`)
	require.Empty(t, paths, "no request left")

	_, err = listed.PIDs(context.Background(), reclaim.Target{Node: "n1", UUID: "GPU-1/../../x?y", User: "bob"})
	require.NotErrorIs(t, err, reclaim.ErrGone, "a 404 that does not name the unit's node is not 'gone'")
	require.ErrorContains(t, err, `names node "", not the unit's`)
	require.Equal(t, []string{"/api/v1/units/GPU-1%2F..%2F..%2Fx%3Fy"}, paths, "the uuid stays one path segment")
	_, err = listed.Released(context.Background(), &reclaim.Reclaim{Target: reclaim.Target{Node: "n1", UUID: "GPU-1", User: "bob"}, Killed: []int{1}})
	require.Error(t, err, "nor released")
}
