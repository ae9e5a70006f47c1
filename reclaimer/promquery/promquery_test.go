package promquery

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
)

func TestDemand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   bool
		err    string
	}{
		{"a sample", 200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"3"]}]}}`, true, ""},
		{"no sample", 200, `{"status":"success","data":{"resultType":"vector","result":[]}}`, false, ""},
		{"bad query", 400, `{"status":"error","errorType":"bad_data","error":"parse error"}`, false, "400 Bad Request: bad_data: parse error"},
		{"a scalar", 200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`, false, "returned a scalar"},
		{"not Prometheus", 502, `<html>bad gateway</html>`, false, "502 Bad Gateway: not Prometheus's query API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *http.Request
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.NoError(t, r.ParseForm())
				got = r
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			hc := config.DefaultHTTPClient()
			hc.Authorization = &promconfig.Authorization{Type: "Bearer", Credentials: "t0k"}
			c := &Client{URL: srv.URL + "/", HTTP: newClient(t, hc), Timeout: 5 * time.Second}
			ok, err := c.Demand(context.Background(), `up{job="x"} > 0`)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.want, ok)
			require.Equal(t, "/api/v1/query", got.URL.Path)
			require.Equal(t, `up{job="x"} > 0`, got.PostForm.Get("query"))
			require.Equal(t, "5s", got.PostForm.Get("timeout"))
			require.Equal(t, "Bearer t0k", got.Header.Get("Authorization"))
		})
	}
}

// An answer too large to be a yes or no is refused, not read whole.
func TestDemandBoundsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, maxResponseBytes+10))
	}))
	defer srv.Close()
	_, err := (&Client{URL: srv.URL}).Demand(context.Background(), "up")
	require.ErrorContains(t, err, "answer over")
}

func newClient(t *testing.T, hc config.HTTPClient) *http.Client {
	c, err := config.NewHTTPClient(hc, "prometheus", 5*time.Second)
	require.NoError(t, err)
	return c
}

// Prometheus behind a private CA, and behind mutual TLS.
func TestTLS(t *testing.T) {
	prom := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
	})
	tlstest.Check(t, prom, func(t *testing.T, url string, hc config.HTTPClient) error {
		_, err := (&Client{URL: url, HTTP: newClient(t, hc), Timeout: 5 * time.Second}).Query(context.Background(), "up")
		return err
	})
}
