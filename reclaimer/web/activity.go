package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ActivityReader says when a pod's GPUs were last active (promquery).
type ActivityReader interface {
	LastActive(ctx context.Context, namespace, pod string, threshold float64, lookback, step time.Duration) (last time.Time, held bool, err error)
}

// Activity is GET /api/v1/activity's answer, in the shape Kubeflow
// Notebooks' activity probe reads from the file it names in
// OUTPUT_JSON_PATH: has_activity true when a GPU of the pod was active
// within activity.recent, else false with the last time one was (absent
// when none was within activity.lookback).
type Activity struct {
	HasActivity  bool       `json:"has_activity"`
	LastActivity *time.Time `json:"last_activity,omitempty"`
}

// activity answers when the GPUs of ?namespace=&pod= were last active.
func (s *Server) activity(w http.ResponseWriter, r *http.Request) {
	code := http.StatusOK
	defer func() { s.requests.WithLabelValues("activity", fmt.Sprint(code)).Inc() }()
	fail := func(c int, msg string) {
		code = c
		writeJSON(w, c, problem{Error: msg})
	}
	a := s.cfg.Activity
	if !authorized(r, a.BearerToken, nil) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpureclaim-reclaimer"`)
		fail(http.StatusUnauthorized, "a valid bearer token (activity.bearer_token_file) is required")
		return
	}
	ns, pod := r.URL.Query().Get("namespace"), r.URL.Query().Get("pod")
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		fail(http.StatusBadRequest, fmt.Sprintf("namespace %q: %s", ns, strings.Join(errs, "; ")))
		return
	}
	if errs := validation.IsDNS1123Subdomain(pod); len(errs) > 0 {
		fail(http.StatusBadRequest, fmt.Sprintf("pod %q: %s", pod, strings.Join(errs, "; ")))
		return
	}
	recent, lookback := time.Duration(a.Recent), time.Duration(a.Lookback)
	// Fine enough to tell recent from not, coarse enough for a week.
	step := min(time.Minute, max(time.Second, recent/5))
	last, held, err := s.activityReader.LastActive(r.Context(), ns, pod, a.Threshold, lookback, step)
	if err != nil {
		s.log.Warn("reading a pod's GPU activity from Prometheus", "namespace", ns, "pod", pod, "err", err)
		// A probe that fails culls nothing: the culler waits.
		fail(http.StatusServiceUnavailable, "Prometheus did not answer: "+err.Error())
		return
	}
	if !held {
		fail(http.StatusNotFound, fmt.Sprintf("%s/%s held no GPU in the last %s", ns, pod, lookback))
		return
	}
	out := Activity{}
	if !last.IsZero() {
		out.LastActivity = &last
		out.HasActivity = s.clock().Sub(last) <= recent
	}
	writeJSON(w, http.StatusOK, out)
}
