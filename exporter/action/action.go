// Package action is the exporter's node action endpoint: off by default,
// behind a bearer token, it lets the reclaimer signal the processes on one
// unit. The node checks for itself, in its own recent samples, that the unit
// is idle and that the processes are the ones the reclaimer named (PID and
// start time) before it sends SIGTERM, waits a checkpoint grace, then
// SIGKILL.
package action

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/internal/nodeapi"
)

// Config of the endpoint.
type Config struct {
	Token string
	// Grace is how long processes get between SIGTERM and SIGKILL, to checkpoint.
	Grace time.Duration
	// IdleWindow and IdleThreshold: every reading of the window must be below the threshold.
	IdleWindow    time.Duration
	IdleThreshold float64
	// ExemptUsers are never signalled.
	ExemptUsers []string
	Clock       func() time.Time
	Logger      *slog.Logger
}

// Source gives the latest snapshot.
type Source interface{ Latest() *sampler.Snapshot }

// Handler serves /api/v1/units/{uuid} and /api/v1/units/{uuid}/kill.
type Handler struct {
	cfg     Config
	src     Source
	hist    *History
	sig     Signaler
	results *prometheus.CounterVec

	mu     sync.Mutex
	busy   map[string]bool
	fences map[string]int64 // the newest term a kill carried, by Lease
	poll   time.Duration
	sleep  func(time.Duration)
}

// New returns the endpoint; reg gets its metrics.
func New(cfg Config, src Source, hist *History, sig Signaler, reg prometheus.Registerer) *Handler {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Handler{
		cfg: cfg, src: src, hist: hist, sig: sig, busy: map[string]bool{}, fences: map[string]int64{}, poll: 100 * time.Millisecond, sleep: time.Sleep,
		results: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "gpureclaim_exporter_actions_total",
			Help: "Requests to the node action endpoint, by result (killed, gone, refused, error).",
		}, []string{"result"}),
	}
}

const maxBody = 64 << 10

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpureclaim-exporter"`)
		writeJSON(w, http.StatusUnauthorized, nodeapi.KillResult{Error: "a valid bearer token is required"})
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/units/")
	if !ok || rest == "" {
		writeJSON(w, http.StatusNotFound, nodeapi.KillResult{Error: "no such endpoint"})
		return
	}
	uuid, verb, _ := strings.Cut(rest, "/")
	switch {
	case verb == "" && r.Method == http.MethodGet:
		h.get(w, uuid)
	case verb == "kill" && r.Method == http.MethodPost:
		h.kill(w, r, uuid)
	case verb == "" || verb == "kill":
		w.Header().Set("Allow", map[string]string{"": "GET", "kill": "POST"}[verb])
		writeJSON(w, http.StatusMethodNotAllowed, nodeapi.KillResult{Error: "method not allowed"})
	default:
		writeJSON(w, http.StatusNotFound, nodeapi.KillResult{Error: "no such endpoint"})
	}
}

func (h *Handler) authorized(r *http.Request) bool {
	tok, ok := httpserver.BearerToken(r)
	return ok && h.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(h.cfg.Token)) == 1
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *Handler) unit(uuid string) (*sampler.Snapshot, *sampler.Unit) {
	s := h.src.Latest()
	if s == nil {
		return nil, nil
	}
	_, u := s.Unit(uuid)
	return s, u
}

// noUnit answers that the node has no such unit, naming itself; before
// its first sample it cannot tell, and says so.
func (h *Handler) noUnit(w http.ResponseWriter, s *sampler.Snapshot, uuid string) {
	if s == nil {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, nodeapi.KillResult{Error: "the node has not sampled its GPUs yet"})
		return
	}
	writeJSON(w, http.StatusNotFound, nodeapi.KillResult{Error: "no unit " + uuid + " on this node", Node: s.Node})
}

func (h *Handler) get(w http.ResponseWriter, uuid string) {
	s, u := h.unit(uuid)
	if u == nil {
		h.noUnit(w, s, uuid)
		return
	}
	out := nodeapi.Unit{UUID: uuid, Node: s.Node, Idleness: h.hist.Check(uuid, h.cfg.IdleThreshold, h.cfg.Clock()), Processes: []nodeapi.Process{}}
	for _, p := range u.Processes {
		out.Processes = append(out.Processes, nodeapi.Process{PID: p.PID, StartTime: p.StartTime, User: p.User, Name: p.Name, SlurmJob: p.SlurmJob, PodUID: p.PodUID})
	}
	writeJSON(w, http.StatusOK, out)
}

// Results of a kill request: the result label of
// gpureclaim_exporter_actions_total.
const (
	ResultKilled  = "killed"
	ResultGone    = "gone"
	ResultRefused = "refused"
	ResultError   = "error"
)

// Results lists every result.
var Results = []string{ResultKilled, ResultGone, ResultRefused, ResultError}

// refuse answers 409: the node will not act, and says why.
func (h *Handler) refuse(w http.ResponseWriter, uuid, why string) {
	h.results.WithLabelValues(ResultRefused).Inc()
	h.cfg.Logger.Warn("refused to kill", "uuid", uuid, "reason", why)
	writeJSON(w, http.StatusConflict, nodeapi.KillResult{Error: why})
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, uuid string) {
	var req nodeapi.KillRequest
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		code := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			code = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, code, nodeapi.KillResult{Error: "bad request: " + err.Error()})
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, nodeapi.KillResult{Error: "bad request: trailing data"})
		return
	}
	if len(req.Processes) == 0 {
		writeJSON(w, http.StatusBadRequest, nodeapi.KillResult{Error: "bad request: processes is empty"})
		return
	}

	h.mu.Lock()
	if newest := h.fences[req.Lease]; req.Lease != "" && req.Fence < newest {
		h.mu.Unlock()
		h.refuse(w, uuid, fmt.Sprintf("term %d of Lease %s is older than %d: another reclaimer replica leads now", req.Fence, req.Lease, newest))
		return
	}
	if req.Lease != "" {
		h.fences[req.Lease] = max(h.fences[req.Lease], req.Fence)
	}
	if h.busy[uuid] {
		h.mu.Unlock()
		// Busy is not a refusal: the caller retries once the running kill
		// (SIGTERM, the grace, SIGKILL) has had its time.
		w.Header().Set("Retry-After", fmt.Sprint(int(h.cfg.Grace.Seconds())+1))
		writeJSON(w, http.StatusServiceUnavailable, nodeapi.KillResult{Error: "another request is acting on this unit"})
		return
	}
	h.busy[uuid] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.busy, uuid)
		h.mu.Unlock()
	}()

	s, u := h.unit(uuid)
	if u == nil {
		h.noUnit(w, s, uuid)
		return
	}
	on := map[int]sampler.Process{}
	for _, p := range u.Processes {
		if p.Unattributed != "" {
			// Its PID may name another process, or none, in this node's view.
			h.refuse(w, uuid, fmt.Sprintf("pid %d on the unit cannot be checked in this node's /proc (%s): the node signals no process it cannot check", p.PID, p.Unattributed))
			return
		}
		on[p.PID] = p
	}
	named := map[int]bool{}
	var res nodeapi.KillResult
	var targets []nodeapi.Process
	for _, p := range req.Processes {
		named[p.PID] = true
		cur, still := on[p.PID]
		switch {
		case p.PID <= 1:
			h.refuse(w, uuid, fmt.Sprintf("pid %d is never signalled", p.PID))
			return
		case still && !cur.StartTime.IsZero() && !cur.StartTime.Equal(p.StartTime):
			h.refuse(w, uuid, fmt.Sprintf("pid %d started at %s, not %s: another process", p.PID, cur.StartTime.Format(time.RFC3339Nano), p.StartTime.Format(time.RFC3339Nano)))
			return
		case !h.sig.Alive(p.PID, p.StartTime):
			res.Gone = append(res.Gone, p.PID) // exited
		case !still:
			h.refuse(w, uuid, fmt.Sprintf("pid %d runs but holds no context on %s", p.PID, uuid))
			return
		case slices.Contains(h.cfg.ExemptUsers, cur.User):
			h.refuse(w, uuid, fmt.Sprintf("pid %d belongs to user %s, who is exempt", p.PID, cur.User))
			return
		case strings.HasPrefix(cur.Name, "nvidia-cuda-mps"):
			h.refuse(w, uuid, fmt.Sprintf("pid %d is the MPS server", p.PID))
			return
		default:
			targets = append(targets, p)
		}
	}
	for _, p := range u.Processes {
		if !named[p.PID] && !strings.HasPrefix(p.Name, "nvidia-cuda-mps") {
			h.refuse(w, uuid, fmt.Sprintf("the unit has a process the request does not name (pid %d): it is not the workload the alert was about", p.PID))
			return
		}
	}
	if len(targets) == 0 {
		h.results.WithLabelValues(ResultGone).Inc()
		res.Killed = []int{}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if idl := h.hist.Check(uuid, h.cfg.IdleThreshold, h.cfg.Clock()); !idl.Idle {
		if !idl.Known {
			w.Header().Set("Retry-After", fmt.Sprint(int(h.cfg.IdleWindow.Seconds())+1))
			writeJSON(w, http.StatusServiceUnavailable, nodeapi.KillResult{Error: fmt.Sprintf("the node's history of %s does not cover %s yet; try later", uuid, h.cfg.IdleWindow)})
			return
		}
		h.refuse(w, uuid, fmt.Sprintf("%s is busy: activity reached %.1f%% in the last %s", uuid, idl.Max*100, h.cfg.IdleWindow))
		return
	}

	h.cfg.Logger.Info("ending the processes on an idle unit", "uuid", uuid, "processes", len(targets), "reason", req.Reason, "grace", h.cfg.Grace)
	for _, p := range targets {
		if err := h.sig.Signal(p.PID, syscall.SIGTERM); err != nil {
			h.results.WithLabelValues(ResultError).Inc()
			writeJSON(w, http.StatusInternalServerError, nodeapi.KillResult{Error: fmt.Sprintf("SIGTERM to %d: %v", p.PID, err)})
			return
		}
	}
	deadline := time.Now().Add(h.cfg.Grace)
	for {
		alive := 0
		for _, p := range targets {
			if h.sig.Alive(p.PID, p.StartTime) {
				alive++
			}
		}
		if alive == 0 || time.Now().After(deadline) {
			break
		}
		h.sleep(h.poll)
	}
	for _, p := range targets {
		if h.sig.Alive(p.PID, p.StartTime) {
			h.cfg.Logger.Warn("process outlived the grace: SIGKILL", "pid", p.PID)
			if err := h.sig.Signal(p.PID, syscall.SIGKILL); err != nil {
				h.results.WithLabelValues(ResultError).Inc()
				writeJSON(w, http.StatusInternalServerError, nodeapi.KillResult{Error: fmt.Sprintf("SIGKILL to %d: %v", p.PID, err)})
				return
			}
		}
		res.Killed = append(res.Killed, p.PID)
	}
	h.results.WithLabelValues(ResultKilled).Inc()
	writeJSON(w, http.StatusOK, res)
}
