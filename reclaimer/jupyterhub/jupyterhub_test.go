package jupyterhub_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub/hubtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

var ctx = context.Background()

func TestStopAndStart(t *testing.T) {
	hub := hubtest.New("culler-token", "alice", "bob/gpu")
	defer hub.Close()
	c := jupyterhub.New(hub.API(), "culler-token", 5*time.Second)

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

	bad := jupyterhub.New(hub.API(), "wrong", 5*time.Second)
	err := bad.Stop(ctx, "bob", "")
	require.ErrorContains(t, err, "hub answered 403")
	var retry *reclaim.RetryError
	require.False(t, errors.As(err, &retry), "a refused token is not retried")
}

func TestHubErrorsAreRetried(t *testing.T) {
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
		err := jupyterhub.New(srv.URL, "t", 5*time.Second).Stop(ctx, "alice", "")
		var retry *reclaim.RetryError
		require.True(t, errors.As(err, &retry), "%d: %v", status, err)
		srv.Close()
	}
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Close()
	err := jupyterhub.New(srv.URL, "t", 5*time.Second).Stop(ctx, "alice", "")
	var retry *reclaim.RetryError
	require.True(t, errors.As(err, &retry), "an unreachable hub is retried: %v", err)
}
