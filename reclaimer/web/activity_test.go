package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// reader answers LastActive from a table by namespace/pod.
type reader struct {
	last map[string]time.Time // held, last active (zero: never)
	err  error
	asks []string
}

func (r *reader) LastActive(_ context.Context, ns, pod string, threshold float64, lookback, step time.Duration) (time.Time, bool, error) {
	r.asks = append(r.asks, ns+"/"+pod)
	if r.err != nil {
		return time.Time{}, false, r.err
	}
	last, held := r.last[ns+"/"+pod]
	return last, held, nil
}

// GET /api/v1/activity in the shape Kubeflow Notebooks' activity probe
// reads, with its token only, for valid names, 404 for a pod that held no
// GPU and 503 (cull nothing) when Prometheus does not answer.
func TestActivityEndpoint(t *testing.T) {
	cfg := reclaimtest.Config(t, "prometheus: {url: \"http://127.0.0.1:9090\"}\nactivity: {bearer_token_file: token, recent: 5m}\n")
	now := reclaimtest.T0.Add(time.Hour)
	r := &reader{last: map[string]time.Time{"ml/busy": now.Add(-time.Minute), "ml/idle": now.Add(-40 * time.Minute), "ml/never": {}}}
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Engine: nil, Clock: func() time.Time { return now }, Registry: prometheus.NewRegistry(), Activity: r}))
	t.Cleanup(srv.Close)
	get := func(query, token string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/activity?"+query, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	for _, tc := range []struct {
		name, query, token string
		code               int
		want               map[string]any
	}{
		{"active within recent", "namespace=ml&pod=busy", "t0ken", 200, map[string]any{"has_activity": true, "last_activity": now.Add(-time.Minute).Format(time.RFC3339)}},
		{"idle for 40m", "namespace=ml&pod=idle", "t0ken", 200, map[string]any{"has_activity": false, "last_activity": now.Add(-40 * time.Minute).Format(time.RFC3339)}},
		{"never active", "namespace=ml&pod=never", "t0ken", 200, map[string]any{"has_activity": false}},
		{"held nothing", "namespace=ml&pod=gone", "t0ken", 404, map[string]any{"error": "ml/gone held no GPU in the last 168h0m0s"}},
		{"no token", "namespace=ml&pod=busy", "", 401, nil},
		{"a wrong token", "namespace=ml&pod=busy", "nope", 401, nil},
		{"a bad namespace", "namespace=ML_x&pod=busy", "t0ken", 400, nil},
		{"no pod", "namespace=ml", "t0ken", 400, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(tc.query, tc.token)
			require.Equal(t, tc.code, code, "%v", body)
			if tc.want != nil {
				require.Equal(t, tc.want, body)
			}
		})
	}
	require.Equal(t, []string{"ml/busy", "ml/idle", "ml/never", "ml/gone"}, r.asks, "refused requests never reach Prometheus")

	r.err = errors.New("connection refused")
	code, body := get("namespace=ml&pod=other", "t0ken")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body["error"], "connection refused")
	code, _ = get("namespace=ml&pod=busy", "t0ken")
	require.Equal(t, http.StatusOK, code, "an answer is kept for a step")
}

// A probe in every notebook pod costs Prometheus one question per pod and
// step: answers are kept for a step and shared; past a rate of new
// questions the endpoint answers 429 with Retry-After, and asks nothing.
func TestActivityEndpointKeepsAndLimitsItsQuestions(t *testing.T) {
	cfg := reclaimtest.Config(t, "prometheus: {url: \"http://127.0.0.1:9090\"}\nactivity: {bearer_token_file: token, recent: 5m}\n")
	now := reclaimtest.T0.Add(time.Hour)
	clock := func() time.Time { return now }
	r := &reader{last: map[string]time.Time{}}
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Clock: clock, Registry: prometheus.NewRegistry(), Activity: r}))
	t.Cleanup(srv.Close)
	get := func(pod string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/activity?namespace=ml&pod="+pod, nil)
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	r.last["ml/nb"] = now.Add(-time.Minute)
	for range 20 {
		require.Equal(t, http.StatusOK, get("nb").StatusCode)
	}
	require.Equal(t, []string{"ml/nb"}, r.asks, "asked once for twenty probes within a step")
	now = now.Add(time.Minute)
	require.Equal(t, http.StatusOK, get("nb").StatusCode)
	require.Len(t, r.asks, 2, "and again a step later")

	// Many pods at once: the limit's burst, then 429 without a question.
	limited := 0
	for i := range 200 {
		resp := get(fmt.Sprintf("nb-%d", i))
		if resp.StatusCode == http.StatusTooManyRequests {
			require.Equal(t, "1", resp.Header.Get("Retry-After"))
			limited++
		}
	}
	require.Equal(t, 161, limited, "the burst of 40 less the question just asked, on the reclaimer's clock, which stands still here")
	require.Len(t, r.asks, 2+39, "a limited request asks nothing")
}

// Without activity: the endpoint is not served.
func TestActivityEndpointOff(t *testing.T) {
	cfg := reclaimtest.Config(t, "prometheus: {url: \"http://127.0.0.1:9090\"}\n")
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Clock: time.Now, Registry: prometheus.NewRegistry(), Activity: &reader{}}))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/api/v1/activity?namespace=ml&pod=busy")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}
