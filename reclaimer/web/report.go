package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/report"
)

// ReportBuilder builds the report of the window that ends now.
type ReportBuilder func(ctx context.Context, window time.Duration) (report.Report, error)

// maxReportDays bounds the window a report may ask Prometheus for.
const maxReportDays = 90

// reportKeptFor is how long a report is served again before it is built
// anew: its figures are days long.
const reportKeptFor = 5 * time.Minute

// report serves GET /api/v1/report?days=7: the weekly report (or another
// number of days), as text, or as JSON with Accept: application/json.
func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	code := http.StatusOK
	defer func() { s.requests.WithLabelValues("report", fmt.Sprint(code)).Inc() }()
	days := 7
	if v := r.URL.Query().Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxReportDays {
			code = http.StatusBadRequest
			writeJSON(w, code, problem{Error: fmt.Sprintf("days %q: give a whole number of days from 1 to %d", v, maxReportDays)})
			return
		}
		days = n
	}
	rep, err := s.reports.get(r.Context(), strconv.Itoa(days), func(ctx context.Context) (report.Report, error) {
		select { // one report at a time: each is many range queries
		case s.reportBuilding <- struct{}{}:
			defer func() { <-s.reportBuilding }()
		default:
			return report.Report{}, errBusy
		}
		return s.reportBuilder(ctx, time.Duration(days)*24*time.Hour)
	})
	if errors.Is(err, errBusy) {
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", "5")
		writeJSON(w, code, problem{Error: "another report is being built: ask again"})
		return
	}
	if err != nil {
		s.log.Warn("building the report", "err", err)
		code = http.StatusServiceUnavailable
		writeJSON(w, code, problem{Error: "Prometheus did not answer: " + err.Error()})
		return
	}
	if r.Header.Get("Accept") == "application/json" {
		writeJSON(w, code, rep)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_ = rep.Text(w) // a client that went away
}
