package web

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/report"
)

// Engine is what the server needs of the lifecycle.
type Engine interface {
	IngestNotification(n *notification.Notification) (lifecycle.IngestResult, error)
	List() []*reclaim.Reclaim
	Page(q lifecycle.Query) lifecycle.Page
	Get(id string) (*reclaim.Reclaim, bool)
	Audit(limit int) ([]reclaim.Event, error)
	Restore(ctx context.Context, id, by string) (*reclaim.Reclaim, error)
	BreakerOpen() bool
}

// Server serves the reclaimer's HTTP endpoints.
type Server struct {
	cfg      *config.Config
	engine   Engine
	log      *slog.Logger
	clock    func() time.Time
	gatherer prometheus.Gatherer
	requests *prometheus.CounterVec
	mux      *http.ServeMux
	ready    func() error
	// turns holds a token per notification being read and decoded
	// (webhook.max_concurrent); turnWait is how long one waits for a turn.
	turns    chan struct{}
	turnWait time.Duration
	inFlight prometheus.Gauge
	// activityReader answers GET /api/v1/activity, with activity: on.
	activityReader ActivityReader
	// reportBuilder answers GET /api/v1/report, with Prometheus configured.
	reportBuilder ReportBuilder
	// Each answer Prometheus gave, kept a while (cache.go); a limit on the
	// questions the activity probe asks, and one report built at a time.
	activities     *answers[lastActive]
	activityLimit  *rate.Limiter
	reports        *answers[report.Report]
	reportBuilding chan struct{}
}

// Options configure a Server.
type Options struct {
	Config   *config.Config
	Engine   Engine
	Logger   *slog.Logger
	Clock    func() time.Time
	Registry *prometheus.Registry
	// Metrics are the server's, registered on Registry once for every
	// term the replica leads; nil registers new ones.
	Metrics *Metrics
	// Ready reports whether the reclaimer can take notifications (the store is open).
	Ready func() error
	// TurnWait is how long a notification waits for its turn to be read
	// (webhook.max_concurrent) before it is answered 503. Default 10s.
	TurnWait time.Duration
	// Activity reads GPU activity for GET /api/v1/activity, which is served
	// when it is set and activity: is on.
	Activity ActivityReader
	// Report builds GET /api/v1/report, which is served when it is set.
	Report ReportBuilder
}

// Metrics are the server's own: its requests and the notifications in flight.
type Metrics struct {
	requests *prometheus.CounterVec
	inFlight prometheus.Gauge
}

// NewMetrics registers the server's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		requests: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
			Name: "gpureclaim_reclaimer_http_requests_total",
			Help: "HTTP requests, by handler and status code.",
		}, []string{"handler", "code"}),
		inFlight: promauto.With(reg).NewGauge(prometheus.GaugeOpts{
			Name: "gpureclaim_reclaimer_webhook_requests_in_flight",
			Help: "Notifications being read or recorded: at most webhook.max_concurrent.",
		}),
	}
}

// New builds the server and its routes.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: o.Config, engine: o.Engine, log: o.Logger, clock: o.Clock, gatherer: o.Registry, ready: o.Ready, mux: http.NewServeMux(),
		turns: make(chan struct{}, max(1, o.Config.Webhook.MaxConcurrent)), turnWait: cmp.Or(o.TurnWait, 10*time.Second),
	}
	m := o.Metrics
	if m == nil {
		m = NewMetrics(o.Registry)
	}
	s.requests, s.inFlight = m.requests, m.inFlight
	s.mux.HandleFunc("/webhook", s.webhook)
	s.mux.Handle("GET /api/v1/reclaims", s.readers(s.list))
	s.mux.Handle("GET /api/v1/reclaims/{id}", s.readers(s.get))
	s.mux.HandleFunc("POST /api/v1/reclaims/{id}/restore", s.restore)
	if o.Activity != nil && o.Config.Activity.On() {
		s.activityReader = o.Activity
		s.activities = newAnswers[lastActive](activityStep(o.Config.Activity), maxActivityAnswers, o.Clock)
		s.activityLimit = rate.NewLimiter(activityQueriesPerSecond, activityQueryBurst)
		s.mux.HandleFunc("GET /api/v1/activity", s.activity)
	}
	if o.Report != nil {
		s.reportBuilder = o.Report
		s.reports = newAnswers[report.Report](reportKeptFor, maxReportDays, o.Clock)
		s.reportBuilding = make(chan struct{}, 1)
		s.mux.Handle("GET /api/v1/report", s.readers(s.report))
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("GET /{$}", s.readers(s.status))
	return s
}

// readers guards the status page and the API with web.auth.
func (s *Server) readers(h http.HandlerFunc) http.Handler {
	a := s.cfg.Web.Auth
	if a.None {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, a.BearerToken, a.BasicAuth) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpureclaim-reclaimer", Basic realm="gpureclaim-reclaimer"`)
			writeJSON(w, http.StatusUnauthorized, problem{Error: "the status page and the API need web.auth's bearer token or basic auth"})
			return
		}
		h(w, r)
	})
}

// Handle adds a route (the Slack interactions).
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if s.ready != nil {
		if err := s.ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Write([]byte("ready\n"))
}

// Pages of the list API: limit= defaults to defaultPage, at most maxPage.
const (
	defaultPage = 500
	maxPage     = 5000
	// statusPending bounds the pending reclaims the status page lists.
	statusPending = 500
)

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("continue")
	if after == "" {
		after = r.URL.Query().Get("after") // the name before the public type
	}
	q := lifecycle.Query{States: map[reclaim.State]bool{}, Limit: defaultPage, After: after}
	for _, st := range strings.Split(r.URL.Query().Get("state"), ",") {
		if st != "" {
			q.States[reclaim.State(st)] = true
		}
	}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxPage {
			s.requests.WithLabelValues("reclaims", "400").Inc()
			writeJSON(w, http.StatusBadRequest, problem{Error: fmt.Sprintf("limit=%s: give 1 to %d", l, maxPage)})
			return
		}
		q.Limit = n
	}
	p := s.engine.Page(q)
	out := v1alpha1.GPUReclaimList{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind + "List"},
		ListMeta: metav1.ListMeta{Continue: p.Next},
		Items:    make([]v1alpha1.GPUReclaim, 0, len(p.Reclaims)),
	}
	for _, rc := range p.Reclaims {
		out.Items = append(out.Items, *served(rc))
	}
	s.requests.WithLabelValues("reclaims", "200").Inc()
	writeJSON(w, http.StatusOK, out)
}

// served is a reclaim as the API answers it: its public record, without
// the notifiers' own references to their messages (the store keeps them,
// to update a message later).
func served(r *reclaim.Reclaim) *v1alpha1.GPUReclaim {
	g := reclaim.ToAPI(r, nil)
	for _, d := range []*v1alpha1.Delivery{g.Status.Warning, g.Status.Final} {
		if d != nil {
			d.Refs = nil
		}
	}
	return g
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	rc, ok := s.engine.Get(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, problem{Error: "no such reclaim"})
		return
	}
	writeJSON(w, http.StatusOK, served(rc))
}

func (s *Server) restore(w http.ResponseWriter, r *http.Request) {
	if s.cfg.AdminBearerToken == "" {
		writeJSON(w, http.StatusForbidden, problem{Error: "restores through the API need admin_bearer_token_file in the config"})
		return
	}
	if tok, ok := httpserver.BearerToken(r); !ok || !eq(tok, s.cfg.AdminBearerToken) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpureclaim-reclaimer"`)
		writeJSON(w, http.StatusUnauthorized, problem{Error: "the admin bearer token is required"})
		return
	}
	rc, err := s.engine.Restore(r.Context(), r.PathValue("id"), "api")
	switch {
	case errors.Is(err, reclaim.ErrNotRestorable):
		writeJSON(w, http.StatusConflict, problem{Error: err.Error()})
	case err != nil && strings.HasPrefix(err.Error(), "no reclaim"):
		writeJSON(w, http.StatusNotFound, problem{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusBadGateway, problem{Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, served(rc))
	}
}

//go:embed status.html
var assets embed.FS

var statusPage = htmltemplate.Must(htmltemplate.New("status.html").Funcs(htmltemplate.FuncMap{
	"rfc3339": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return now.Sub(t).Round(time.Second).String()
	},
}).ParseFS(assets, "status.html"))

type statusData struct {
	Now         time.Time
	Pending     []*reclaim.Reclaim
	MorePending int // pending reclaims past the page's bound
	Recent      []*reclaim.Reclaim
	Events      []reclaim.Event
	BreakerOpen bool
	DryRun      bool
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request) {
	d := statusData{Now: s.clock(), BreakerOpen: s.engine.BreakerOpen(), DryRun: s.cfg.DryRun}
	for _, rc := range s.engine.List() {
		switch rc.State {
		case reclaim.Pending, reclaim.Acting, reclaim.Snoozed:
			if len(d.Pending) == statusPending {
				d.MorePending++
				continue
			}
			d.Pending = append(d.Pending, rc)
		case reclaim.Resolved:
		default:
			if len(d.Recent) < 50 {
				d.Recent = append(d.Recent, rc)
			}
		}
	}
	d.Events, _ = s.engine.Audit(30)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := statusPage.Execute(w, d); err != nil {
		s.log.Error("rendering the status page", "err", err)
	}
}
