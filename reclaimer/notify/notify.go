// Package notify holds the reclaimer's simple notifiers: the log, and a
// generic webhook that receives every message as JSON. Slack has its own
// package.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Log writes every message to the log.
type Log struct{ Logger *slog.Logger }

func (Log) Name() string   { return "log" }
func (Log) Blocking() bool { return false }

func (l Log) Send(_ context.Context, m reclaim.Message, _ map[string]string) (map[string]string, []string, error) {
	attrs := []any{"kind", m.Kind}
	if r := m.Reclaim; r != nil {
		attrs = append(attrs, "reclaim", r.ID, "owner", r.Target.Holder(), "unit", r.Target.Unit())
	}
	l.Logger.Info(m.Text, attrs...)
	return nil, []string{"log"}, nil
}

// WebhookTimeout bounds one delivery to a webhook.
const WebhookTimeout = 10 * time.Second

// Webhook POSTs every message as JSON to a URL; any 2xx is delivered.
type Webhook struct {
	URL string
	// HTTP carries the credentials and TLS (config.NewHTTPClient); nil is
	// http.DefaultClient.
	HTTP *http.Client
}

// Payload is what the webhook receives: the message and the reclaim it is
// about, as its public record (what the stores keep and /api/v1 serves,
// without its audit events). IdempotencyKey is the same for a message
// sent again after a retry or a restart: receivers dedupe on it.
type Payload struct {
	Version        string               `json:"version"`
	Kind           string               `json:"kind"`
	Text           string               `json:"text"`
	IdempotencyKey string               `json:"idempotency_key"`
	Reclaim        *v1alpha1.GPUReclaim `json:"reclaim,omitempty"`
}

func (w *Webhook) Name() string   { return "webhook" }
func (w *Webhook) Blocking() bool { return true }

func (w *Webhook) Send(ctx context.Context, m reclaim.Message, _ map[string]string) (map[string]string, []string, error) {
	p := Payload{Version: "1", Kind: string(m.Kind), Text: m.Text}
	if m.Reclaim != nil {
		p.Reclaim = reclaim.ToAPI(m.Reclaim, nil)
		p.IdempotencyKey = reclaim.MessageKey(m.Reclaim, m.Kind)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	hc := w.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return nil, nil, fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil, []string{"webhook"}, nil
}
