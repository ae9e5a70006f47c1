package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

func TestLogWritesTheMessageAndItsTarget(t *testing.T) {
	var buf bytes.Buffer
	l := Log{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	r := &reclaim.Reclaim{ID: "r1", Target: reclaim.Target{UUID: "GPU-1", Node: "n1", Namespace: "ml", Pod: "train"}}
	refs, channels, err := l.Send(context.Background(), reclaim.Message{Kind: reclaim.MsgWarning, Reclaim: r, Text: "idle"}, nil)
	require.NoError(t, err)
	require.Nil(t, refs)
	require.Equal(t, []string{"log"}, channels)
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, "idle", line["msg"])
	require.Equal(t, "warning", line["kind"])
	require.Equal(t, "r1", line["reclaim"])
	require.Equal(t, r.Target.Holder(), line["owner"])
	require.False(t, l.Blocking(), "a log line is never worth holding a reclaim for")
}

func TestWebhook(t *testing.T) {
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	r := &reclaim.Reclaim{ID: "r1", ActAt: at}
	for _, tc := range []struct {
		name    string
		status  int
		msg     reclaim.Message
		wantKey string
		wantErr string
	}{
		{name: "warning", status: 200, msg: reclaim.Message{Kind: reclaim.MsgWarning, Reclaim: r, Text: "idle"}, wantKey: "r1/warning/0"},
		{name: "outcome", status: 204, msg: reclaim.Message{Kind: reclaim.MsgReclaimed, Reclaim: r, Text: "done"}, wantKey: "r1/reclaimed"},
		{name: "admin message has no key", status: 200, msg: reclaim.Message{Kind: reclaim.MsgAdmin, Text: "breaker open"}},
		{name: "a 5xx is an error", status: 503, msg: reclaim.Message{Kind: reclaim.MsgReclaimed, Reclaim: r}, wantKey: "r1/reclaimed", wantErr: "503"},
		{name: "a 4xx is an error", status: 401, msg: reclaim.Message{Kind: reclaim.MsgReclaimed, Reclaim: r}, wantKey: "r1/reclaimed", wantErr: "401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Payload
			var auth, ctype string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				auth, ctype = req.Header.Get("Authorization"), req.Header.Get("Content-Type")
				require.NoError(t, json.NewDecoder(req.Body).Decode(&got))
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			w := &Webhook{URL: srv.URL, HTTP: bearer(t, "s3cret")}
			_, channels, err := w.Send(context.Background(), tc.msg, nil)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
				require.Equal(t, []string{"webhook"}, channels)
			}
			require.Equal(t, "Bearer s3cret", auth)
			require.Equal(t, "application/json", ctype)
			require.Equal(t, "1", got.Version)
			require.Equal(t, string(tc.msg.Kind), got.Kind)
			require.Equal(t, tc.wantKey, got.IdempotencyKey)
			if r := tc.msg.Reclaim; r != nil {
				require.Equal(t, "GPUReclaim", got.Reclaim.Kind, "the public record")
				require.Equal(t, r.ID, got.Reclaim.Name)
			}
		})
	}
}

// A warning resent after a crash (a later act-at time) keeps its key; one
// due after a snooze ends has its own, so a receiver that dedupes on the
// key drops the first and not the second.
func TestWebhookKeyChangesWithANewWarning(t *testing.T) {
	keys := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p Payload
		require.NoError(t, json.NewDecoder(req.Body).Decode(&p))
		keys[p.IdempotencyKey] = true
	}))
	defer srv.Close()
	w := &Webhook{URL: srv.URL, HTTP: srv.Client()}
	at := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	for _, r := range []*reclaim.Reclaim{{ID: "r1", ActAt: at}, {ID: "r1", ActAt: at.Add(time.Minute)}, {ID: "r1", ActAt: at.Add(time.Hour), WarningRound: 1}} {
		_, _, err := w.Send(context.Background(), reclaim.Message{Kind: reclaim.MsgWarning, Reclaim: r}, nil)
		require.NoError(t, err)
	}
	require.Len(t, keys, 2, "a resend repeats the key; the next round's warning has its own")
	require.True(t, (&Webhook{}).Blocking(), "a webhook must deliver before the grace runs")
}

// bearer is a client that sends a bearer token, as a webhook notifier's
// authorization: {credentials: ...} makes it.
func bearer(t *testing.T, token string) *http.Client {
	hc := config.DefaultHTTPClient()
	hc.Authorization = &promconfig.Authorization{Type: "Bearer", Credentials: promconfig.Secret(token)}
	c, err := config.NewHTTPClient(hc, "webhook", WebhookTimeout)
	require.NoError(t, err)
	return c
}

// A webhook behind a private CA, and behind mutual TLS.
func TestWebhookTLS(t *testing.T) {
	tlstest.Check(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), func(t *testing.T, url string, hc config.HTTPClient) error {
		c, err := config.NewHTTPClient(hc, "webhook", WebhookTimeout)
		require.NoError(t, err)
		_, _, err = (&Webhook{URL: url, HTTP: c}).Send(context.Background(), reclaim.Message{Kind: reclaim.MsgAdmin, Text: "breaker open"}, nil)
		return err
	})
}
