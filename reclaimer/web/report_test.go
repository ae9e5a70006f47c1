package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/report"
	"github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// GET /api/v1/report serves the report of the last days behind web.auth,
// as text or JSON; a bad window is refused, and Prometheus not answering is
// a 503.
func TestReportEndpoint(t *testing.T) {
	cfg := reclaimtest.Config(t, "web: {auth: {bearer_token_file: token}}\n")
	var asked time.Duration
	fail := false
	build := func(_ context.Context, window time.Duration) (report.Report, error) {
		asked = window
		if fail {
			return report.Report{}, errors.New("connection refused")
		}
		return report.Report{Currency: "USD", Namespaces: []report.Row{{Name: "ml", IdleGPUHours: 12.5, Cost: 31.25, Reclaims: 2}}}, nil
	}
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Clock: time.Now, Registry: prometheus.NewRegistry(), Report: build}))
	t.Cleanup(srv.Close)
	get := func(query, token, accept string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/report"+query, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("", "t0ken", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "ml  12.5")
	require.Equal(t, 7*24*time.Hour, asked, "a week unless asked")
	code, body = get("?days=30", "t0ken", "application/json")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 30*24*time.Hour, asked)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, 31.25, rep.Namespaces[0].Cost)
	for _, bad := range []string{"?days=0", "?days=91", "?days=week"} {
		code, _ = get(bad, "t0ken", "")
		require.Equal(t, http.StatusBadRequest, code, bad)
	}
	code, _ = get("", "", "")
	require.Equal(t, http.StatusUnauthorized, code)
	fail = true
	code, _ = get("?days=8", "t0ken", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	asked = 0
	code, _ = get("", "t0ken", "")
	require.Equal(t, http.StatusOK, code, "the week's report is kept a while")
	require.Zero(t, asked, "and not built again")
}

// Reports of 90 days asked at once are built once; a report of another
// window asked while one is built is answered 429, and builds nothing.
func TestReportEndpointBuildsOneAtATime(t *testing.T) {
	cfg := reclaimtest.Config(t, "web: {auth: {bearer_token_file: token}}\n")
	var builds atomic.Int32
	release := make(chan struct{})
	build := func(_ context.Context, window time.Duration) (report.Report, error) {
		builds.Add(1)
		<-release
		return report.Report{Currency: "USD"}, nil
	}
	srv := httptest.NewServer(web.New(web.Options{Config: cfg, Clock: time.Now, Registry: prometheus.NewRegistry(), Report: build}))
	t.Cleanup(srv.Close)
	get := func(days string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/report?days="+days, nil)
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	codes := make(chan int, 5)
	for range 5 {
		go func() { codes <- get("90") }()
	}
	require.Eventually(t, func() bool { return builds.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, http.StatusTooManyRequests, get("30"), "another window while one is built")
	close(release)
	for range 5 {
		require.Equal(t, http.StatusOK, <-codes)
	}
	require.EqualValues(t, 1, builds.Load(), "five asks of 90 days, one build")
}
