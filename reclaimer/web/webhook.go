// Package web is the reclaimer's HTTP side: the Alertmanager webhook, the
// API, the status page, health and metrics.
package web

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/alertmanager/template"

	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// authorized checks a bearer token or basic auth (either passes).
func authorized(r *http.Request, bearer string, basic *config.BasicAuth) bool {
	if bearer != "" {
		if tok, ok := httpserver.BearerToken(r); ok && eq(tok, bearer) {
			return true
		}
	}
	if basic != nil {
		if u, p, ok := r.BasicAuth(); ok && eq(u, basic.Username) && eq(p, basic.Password) {
			return true
		}
	}
	return false
}

func eq(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// Message is Alertmanager's webhook payload, version 4, as its docs define
// it. It is declared here rather than taken from Alertmanager's notify
// package, which would link every notifier integration and the gossip
// cluster into the reclaimer.
type Message struct {
	*template.Data
	Version         string `json:"version"`
	GroupKey        string `json:"groupKey"`
	TruncatedAlerts uint64 `json:"truncatedAlerts"`
}

// DecodeMessage reads and validates an Alertmanager webhook notification
// (payload version 4). It reads at most limit bytes.
func DecodeMessage(r io.Reader) (*Message, error) {
	var m Message
	dec := json.NewDecoder(r)
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not an Alertmanager notification: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the notification")
	}
	if m.Version != "4" {
		return nil, fmt.Errorf("payload version %q is not supported (want 4, Alertmanager 0.x)", m.Version)
	}
	if m.Data == nil || len(m.Alerts) == 0 {
		return nil, errors.New("the notification has no alerts")
	}
	for i, a := range m.Alerts {
		if a.Status != "firing" && a.Status != "resolved" {
			return nil, fmt.Errorf("alerts[%d].status %q is neither firing nor resolved", i, a.Status)
		}
		if a.StartsAt.IsZero() {
			return nil, fmt.Errorf("alerts[%d].startsAt is missing", i)
		}
		if a.Status == "resolved" && a.EndsAt.Before(a.StartsAt) {
			return nil, fmt.Errorf("alerts[%d] is resolved before it started", i)
		}
		if len(a.Labels) == 0 || a.Labels["alertname"] == "" {
			return nil, fmt.Errorf("alerts[%d] has no alertname label", i)
		}
		if a.StartsAt.After(time.Now().Add(24 * time.Hour)) {
			return nil, fmt.Errorf("alerts[%d].startsAt %s is in the future", i, a.StartsAt.Format(time.RFC3339))
		}
	}
	return &m, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

type problem struct {
	Error string `json:"error"`
}

func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	code := 200
	defer func() { s.requests.WithLabelValues("webhook", fmt.Sprint(code)).Inc() }()
	fail := func(c int, msg string) {
		code = c
		writeJSON(w, c, problem{Error: msg})
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		fail(http.StatusMethodNotAllowed, "POST an Alertmanager notification")
		return
	}
	if !authorized(r, s.cfg.Webhook.BearerToken, s.cfg.Webhook.BasicAuth) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpureclaim-reclaimer", Basic realm="gpureclaim-reclaimer"`)
		fail(http.StatusUnauthorized, "a valid bearer token or basic auth is required")
		return
	}
	// Wait for a turn before reading: a burst of large notifications holds
	// at most max_concurrent bodies in memory. 5xx: Alertmanager retries.
	wait := time.NewTimer(s.turnWait)
	defer wait.Stop()
	select {
	case s.turns <- struct{}{}:
		s.inFlight.Inc()
		defer func() { s.inFlight.Dec(); <-s.turns }()
	case <-wait.C:
		w.Header().Set("Retry-After", "1")
		fail(http.StatusServiceUnavailable, fmt.Sprintf("%d notifications are being read (webhook.max_concurrent); retry", cap(s.turns)))
		return
	case <-r.Context().Done():
		fail(http.StatusServiceUnavailable, "the request ended while waiting for a turn")
		return
	}
	body := http.MaxBytesReader(w, r.Body, int64(s.cfg.Webhook.MaxBodyBytes))
	m, err := DecodeMessage(body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("the notification is over %d bytes (webhook.max_body_bytes)", s.cfg.Webhook.MaxBodyBytes))
			return
		}
		// 4xx: Alertmanager does not retry what it cannot fix.
		fail(http.StatusBadRequest, err.Error())
		return
	}
	res, err := s.engine.Ingest(m.Alerts)
	if errors.Is(err, reclaim.ErrNotLeader) {
		w.Header().Set("Retry-After", "5")
		fail(http.StatusServiceUnavailable, "this replica may no longer lead: retry on the leader")
		return
	}
	if err != nil {
		s.log.Error("recording a notification", "err", err)
		// 5xx: nothing was recorded; Alertmanager retries.
		fail(http.StatusInternalServerError, "could not record the notification; retry")
		return
	}
	writeJSON(w, http.StatusOK, res)
}
