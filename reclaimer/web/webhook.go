// Package web is the reclaimer's HTTP side: the Alertmanager webhook, the
// API, the status page, health and metrics.
package web

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
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

// readBody reads a request's body, at most limit bytes, into one buffer of
// its announced length: a notification of 46 MB is read without the copies
// of a growing buffer.
func readBody(w http.ResponseWriter, r *http.Request, limit config.Bytes) ([]byte, error) {
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, int64(limit))) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("reading the notification: %w", err)
	}
	return buf.Bytes(), nil
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
	received := time.Now()
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
	body, err := readBody(w, r, s.cfg.Webhook.MaxBodyBytes)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("the notification is over %d bytes (webhook.max_body_bytes)", s.cfg.Webhook.MaxBodyBytes))
		return
	}
	var n *notification.Notification
	if err == nil {
		n, err = notification.Decode(body)
	}
	if err != nil {
		// 4xx: Alertmanager does not retry what it cannot fix.
		fail(http.StatusBadRequest, err.Error())
		return
	}
	n.Received = received
	res, err := s.engine.IngestNotification(n)
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
