package report_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/promtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/report"
)

// A real Prometheus evaluates the shipped rules over an exporter's series:
// a pod and a bare-metal user each hold an idle GPU. The report prices
// their idle GPU-hours at the rules' price, and counts the week's
// reclaims, snoozes and keeps from the store, per owner and per namespace.
func TestWeekOnPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Prometheus")
	}
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, u := range []struct{ uuid, owner string }{
			{"GPU-a", `namespace="ml",pod="nb-0",container="c",user="",slurm_job=""`},
			{"GPU-b", `namespace="",pod="",container="",user="bob",slurm_job=""`},
		} {
			fmt.Fprintf(w, "gpureclaim_unit_info{uuid=%q,gpu_uuid=%q,node=\"n1\",kind=\"gpu\",gpu_index=\"0\",model=\"H100\",mig_profile=\"\"} 1\n", u.uuid, u.uuid)
			fmt.Fprintf(w, "gpureclaim_unit_sm_active_ratio{uuid=%q,gpu_uuid=%q} 0\n", u.uuid, u.uuid)
			fmt.Fprintf(w, "gpureclaim_unit_owner_info{uuid=%q,gpu_uuid=%q,%s,keep=\"false\",claim_namespace=\"\",claim=\"\"} 1\n", u.uuid, u.uuid, u.owner)
		}
	}))
	defer exporter.Close()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	prom := promtest.Scraping(t, []string{filepath.Join(root, "rules", "gpureclaim.rules.yml")}, promtest.Job{Name: "gpureclaim-exporter", URL: exporter.URL})
	q := &promquery.Client{URL: prom.URL, Timeout: 5 * time.Second}
	ctx := context.Background()
	require.Eventually(t, func() bool {
		s, err := q.Query(ctx, "count_over_time(owner:gpureclaim_gpus_idle_held:sum[1m])")
		return err == nil && len(s) == 2 && s[0].Value >= 10
	}, time.Minute, 200*time.Millisecond, "ten seconds of idle GPUs recorded")

	now := time.Now()
	at := func(owner string, state reclaim.State, snoozedBy string) *reclaim.Reclaim {
		t := reclaim.Target{User: owner}
		if ns, pod, ok := strings.Cut(owner, "/"); ok {
			t = reclaim.Target{Namespace: ns, Pod: pod}
		}
		r := &reclaim.Reclaim{Target: t, State: state, Created: now.Add(-time.Second)}
		if snoozedBy != "" {
			r.Snooze = &reclaim.Snooze{By: snoozedBy}
		}
		return r
	}
	reclaims := []*reclaim.Reclaim{
		at("ml/nb-0", reclaim.Done, ""), at("ml/nb-0", reclaim.Snoozed, "alice"), at("ml/nb-0", reclaim.Exempt, "alice"),
		at("bob", reclaim.Done, ""),
		{Target: reclaim.Target{User: "bob"}, State: reclaim.Done, Created: now.Add(-8 * 24 * time.Hour)}, // before the week
	}
	rep, err := report.Build(ctx, q, reclaims, report.Options{To: now, Window: 10 * time.Second, Step: time.Second})
	require.NoError(t, err)
	require.Equal(t, "USD", rep.Currency)
	require.Len(t, rep.Owners, 2)
	require.Len(t, rep.Namespaces, 2)
	for _, r := range append(rep.Owners, rep.Namespaces...) {
		require.InDelta(t, 10.0/3600, r.IdleGPUHours, 2.0/3600, "%s: ten idle seconds of one GPU", r.Name)
		require.InDelta(t, 2.5*r.IdleGPUHours, r.Cost, 1e-12, "%s: at the rules' price", r.Name)
	}
	byName := map[string]report.Row{}
	for _, r := range append(rep.Owners, rep.Namespaces...) {
		byName[r.Name] = r
	}
	require.Equal(t, [3]int{1, 1, 1}, [3]int{byName["ml/nb-0"].Reclaims, byName["ml/nb-0"].Snoozes, byName["ml/nb-0"].Keeps})
	require.Equal(t, "ml", byName["ml/nb-0"].Namespace)
	require.Equal(t, 1, byName["bob"].Reclaims, "the reclaim before the week is not counted")
	require.Equal(t, 1, byName[report.BareMetal].Reclaims)
	require.Equal(t, 1, byName["ml"].Keeps)

	text := rep.String()
	require.Contains(t, text, "By namespace")
	require.Contains(t, text, "cost (USD)")
	require.Len(t, rep.Of("ml").Owners, 1, "a namespace's part has its owners alone")
}

type fakeProm map[string][]promquery.Sample

func (f fakeProm) Query(_ context.Context, q string) ([]promquery.Sample, error) {
	for k, v := range f {
		if strings.Contains(q, k) {
			return v, nil
		}
	}
	return nil, nil
}

// The units that could share a GPU or fit a smaller slice are counted per
// owner and namespace, from the alerts firing for people.
func TestPackableAndOversized(t *testing.T) {
	pod := func(ns, name string) map[string]string { return map[string]string{"namespace": ns, "pod": name} }
	q := fakeProm{
		`alertname="GPUPackable"`:          {{Labels: pod("web", "a")}, {Labels: pod("web", "b")}},
		`alertname="MIGInstanceOversized"`: {{Labels: pod("web", "a")}},
	}
	rep, err := report.Build(context.Background(), q, nil, report.Options{To: time.Now()})
	require.NoError(t, err)
	require.Equal(t, []report.Row{{Name: "web", Packable: 2, Oversized: 1}}, rep.Namespaces)
	require.Equal(t, []report.Row{{Name: "web/a", Namespace: "web", Packable: 1, Oversized: 1}, {Name: "web/b", Namespace: "web", Packable: 1}}, rep.Owners)
}

type sent []reclaim.Message

func (s *sent) Announce(_ context.Context, m reclaim.Message) bool { *s = append(*s, m); return true }

// The admins get the whole report; each namespace its own part, through
// its owner and channel; each bare-metal user their row; every message
// keyed by the week, so that one sent already is not sent again.
func TestSend(t *testing.T) {
	rep := report.Report{Currency: "EUR",
		Namespaces: []report.Row{{Name: "ml", IdleGPUHours: 3}, {Name: report.BareMetal, IdleGPUHours: 1}},
		Owners:     []report.Row{{Name: "ml/nb-0", Namespace: "ml", IdleGPUHours: 3}, {Name: "bob", User: "bob", IdleGPUHours: 1}}}
	var s sent
	report.Send(context.Background(), &s, rep, "2026-W49")
	require.Len(t, s, 3)
	require.Nil(t, s[0].Reclaim, "the admins'")
	require.Contains(t, s[0].Text, "ml/nb-0")
	require.Contains(t, s[0].Text, "bob")
	require.Equal(t, reclaim.Target{Namespace: "ml"}, s[1].Reclaim.Target)
	require.Contains(t, s[1].Text, "ml/nb-0")
	require.NotContains(t, s[1].Text, "bob", "a namespace sees its own owners")
	require.Equal(t, reclaim.Target{User: "bob"}, s[2].Reclaim.Target)
	require.NotContains(t, s[2].Text, "ml/nb-0")
	for _, m := range s {
		require.Equal(t, reclaim.MsgReport, m.Kind)
		require.True(t, strings.HasPrefix(m.Key, "report/2026-W49"), m.Key)
		require.True(t, m.Again, "looked for before it is sent")
	}
}

// The weekly job sends the report once when it falls due, and a leader
// that takes over after the time waits for the next week.
func TestWeeklyJob(t *testing.T) {
	cfg := reclaimtest.Config(t, "prometheus: {url: http://127.0.0.1:9}\nreport: {day: mon, at: \"09:00\"}\n")
	monday := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	build := func(context.Context, time.Duration) (report.Report, error) {
		return report.Report{Namespaces: []report.Row{{Name: "ml", IdleGPUHours: 2}}}, nil
	}
	var s sent
	job := report.WeeklyJob(cfg.Report, build, &s, slog.New(slog.DiscardHandler), monday.Add(-time.Hour))
	require.Equal(t, time.Minute, job.Every)
	ctx := context.Background()
	require.NoError(t, job.Run(ctx, monday.Add(-time.Minute)))
	require.Empty(t, s, "not due yet")
	require.NoError(t, job.Run(ctx, monday.Add(time.Minute)))
	require.Len(t, s, 2, "the admins' and the namespace's")
	require.Equal(t, "report/2026-11-30", s[0].Key)
	require.NoError(t, job.Run(ctx, monday.Add(2*time.Minute)))
	require.Len(t, s, 2, "once a week")
	require.NoError(t, job.Run(ctx, monday.AddDate(0, 0, 7).Add(time.Minute)))
	require.Len(t, s, 4)
	require.Equal(t, "report/2026-12-07", s[2].Key)

	// A leader from 10:00 on Monday waits for the next Monday.
	s = nil
	late := report.WeeklyJob(cfg.Report, build, &s, slog.New(slog.DiscardHandler), monday.Add(time.Hour))
	require.NoError(t, late.Run(ctx, monday.Add(time.Hour)))
	require.Empty(t, s)

	// A failure to build is the job's error; the week is not sent.
	failing := report.WeeklyJob(cfg.Report, func(context.Context, time.Duration) (report.Report, error) {
		return report.Report{}, context.DeadlineExceeded
	}, &s, slog.New(slog.DiscardHandler), monday.Add(-time.Hour))
	require.ErrorIs(t, failing.Run(ctx, monday.Add(time.Minute)), context.DeadlineExceeded)
	require.Empty(t, s)
}
