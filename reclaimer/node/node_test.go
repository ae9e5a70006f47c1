package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
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
					_ = json.NewEncoder(w).Encode(nodeapi.Unit{UUID: "GPU-1", Processes: []nodeapi.Process{proc}})
					return
				}
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.code)
				_ = json.NewEncoder(w).Encode(tc.body)
			}))
			defer srv.Close()
			c := node.New(config.Nodes{Addresses: map[string]string{"n1": srv.URL}, BearerToken: "node-token", Timeout: config.Duration(5 * time.Second)})
			res, err := c.Kill(context.Background(), &reclaim.Reclaim{ID: "r1", Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Node: "n1", User: "bob"}})
			tc.check(t, res, err)
		})
	}
}
