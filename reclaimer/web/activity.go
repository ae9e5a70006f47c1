package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
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

// The activity probe asks Prometheus at most this often (answers are kept
// for a step, and shared by the probes that ask for one pod at once).
const (
	activityQueriesPerSecond = rate.Limit(20)
	activityQueryBurst       = 40
	maxActivityAnswers       = 10000
)

// errBusy: the question would pass the endpoint's limit.
var errBusy = errors.New("busy")

type lastActive struct {
	last time.Time
	held bool
}

// activityStep is how finely activity is read, and how long an answer is
// kept: fine enough to tell recent from not, coarse enough for a week.
func activityStep(a config.Activity) time.Duration {
	return min(time.Minute, max(time.Second, time.Duration(a.Recent)/5))
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
	step := activityStep(a)
	ans, err := s.activities.get(r.Context(), ns+"/"+pod, func(ctx context.Context) (lastActive, error) {
		if !s.activityLimit.AllowN(s.clock(), 1) {
			return lastActive{}, errBusy
		}
		last, held, err := s.activityReader.LastActive(ctx, ns, pod, a.Threshold, lookback, step)
		return lastActive{last: last, held: held}, err
	})
	last, held := ans.last, ans.held
	if errors.Is(err, errBusy) {
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "1")
		writeJSON(w, code, problem{Error: fmt.Sprintf("more than %g new activity questions a second: ask again", float64(activityQueriesPerSecond))})
		return
	}
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
