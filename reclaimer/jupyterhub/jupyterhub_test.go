package jupyterhub_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	promconfig "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"

	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub/hubtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var ctx = context.Background()

func TestStopAndStart(t *testing.T) {
	hub := hubtest.New("culler-token", "alice", "bob/gpu")
	defer hub.Close()
	c := hub.Client(t, "culler-token")

	require.NoError(t, c.Stop(ctx, "alice", ""))
	require.False(t, hub.Running("alice"))
	require.ErrorIs(t, c.Stop(ctx, "alice", ""), reclaim.ErrGone, "stopping again: already stopped")
	require.NoError(t, c.Stop(ctx, "bob", "gpu"), "a named server")
	require.False(t, hub.Running("bob/gpu"))
	require.ErrorIs(t, c.Stop(ctx, "nobody", ""), reclaim.ErrGone, "a user the hub no longer has")

	require.NoError(t, c.Start(ctx, "alice", ""))
	require.True(t, hub.Running("alice"))
	require.NoError(t, c.Start(ctx, "alice", ""), "starting a running server does nothing twice")
	require.Equal(t, []string{"DELETE alice", "DELETE alice", "DELETE bob/gpu", "DELETE nobody", "POST alice", "POST alice"}, hub.Calls())

	bad := hub.Client(t, "wrong")
	err := bad.Stop(ctx, "bob", "")
	require.ErrorContains(t, err, "hub answered 403")
	var retry *reclaim.RetryError
	require.False(t, errors.As(err, &retry), "a refused token is not retried")
}

func TestHubErrorsAreRetried(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		err := client(t, srv.URL).Stop(ctx, "alice", "")
		var retry *reclaim.RetryError
		require.True(t, errors.As(err, &retry), "%d: %v", status, err)
		srv.Close()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Close()
	err := client(t, srv.URL).Stop(ctx, "alice", "")
	var retry *reclaim.RetryError
	require.True(t, errors.As(err, &retry), "an unreachable hub is retried: %v", err)
}

func client(t *testing.T, url string) *jupyterhub.Client {
	c, err := jupyterhub.New(hubtest.Config(url, "t"))
	require.NoError(t, err)
	return c
}

// The hub behind a private CA, and behind mutual TLS.
func TestTLS(t *testing.T) {
	hub := hubtest.New("culler-token", "alice")
	defer hub.Close()
	tlstest.Check(t, hub.Config.Handler, func(t *testing.T, url string, hc promconfig.HTTPClientConfig) error {
		cfg := hubtest.Config(url+"/hub/api", "culler-token")
		hc.Authorization = cfg.HTTP.Authorization
		cfg.HTTP = hc
		c, err := jupyterhub.New(cfg)
		require.NoError(t, err)
		return c.Start(ctx, "alice", "")
	})
}
