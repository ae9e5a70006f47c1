// Package report builds the weekly report of GPU waste, per namespace and
// per owner: the idle GPU-hours and what they cost, read from Prometheus
// (the rules' records), the reclaims, snoozes and keeps, read from the
// reclaimer's store, and the workloads that could share a GPU or fit a
// smaller MIG slice (GPUPackable, MIGInstanceOversized firing now).
package report

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// DefaultWindow is the report's span: a week.
const DefaultWindow = 7 * 24 * time.Hour

// DefaultStep is the resolution the idle GPUs are summed at over the window.
const DefaultStep = 5 * time.Minute

// Querier runs instant queries (promquery.Client).
type Querier interface {
	Query(ctx context.Context, query string) ([]promquery.Sample, error)
}

// Row is one namespace's or one owner's week.
type Row struct {
	// Name is the namespace, or the holder as reclaim.Target.Holder names it
	// (namespace/pod, a Unix user, a user's Slurm job).
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// User is a bare-metal owner's Unix user.
	User string `json:"user,omitempty"`
	// IdleGPUHours were held but idle; Cost prices them at the rules'
	// price per GPU-hour.
	IdleGPUHours float64 `json:"idle_gpu_hours"`
	Cost         float64 `json:"cost"`
	// Reclaims freed a GPU; Snoozes and Keeps are the owners' answers.
	Reclaims int `json:"reclaims"`
	Snoozes  int `json:"snoozes"`
	Keeps    int `json:"keeps"`
	// Packable and Oversized count the units that could share a GPU or
	// fit a smaller MIG slice, now.
	Packable  int `json:"packable"`
	Oversized int `json:"oversized"`
}

// Report is a window's rows, most idle first.
type Report struct {
	From       time.Time `json:"from"`
	To         time.Time `json:"to"`
	Currency   string    `json:"currency"`
	Namespaces []Row     `json:"namespaces"`
	Owners     []Row     `json:"owners"`
}

// Options say what the report covers.
type Options struct {
	To time.Time
	// Window and Step: the report covers [To-Window, To], the idle GPUs
	// summed at Step. Defaults DefaultWindow and DefaultStep.
	Window, Step time.Duration
}

// Build reads Prometheus and the reclaims into the report.
func Build(ctx context.Context, q Querier, reclaims []*reclaim.Reclaim, o Options) (Report, error) {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Step == 0 {
		o.Step = DefaultStep
	}
	rep := Report{From: o.To.Add(-o.Window), To: o.To}
	namespaces, owners := map[string]*Row{}, map[string]*Row{}
	// rows are the owner's row and its namespace's.
	rows := func(t reclaim.Target) []*Row {
		name, ns := t.Holder(), t.Namespace
		if owners[name] == nil {
			owners[name] = &Row{Name: name, Namespace: ns}
			if t.Pod == "" {
				owners[name].User = t.User
			}
		}
		key := ns
		if key == "" {
			key = BareMetal
		}
		if namespaces[key] == nil {
			namespaces[key] = &Row{Name: key}
		}
		return []*Row{owners[name], namespaces[key]}
	}

	price := 0.0
	ps, err := q.Query(ctx, names.RecGPUHourPrice)
	if err != nil {
		return Report{}, fmt.Errorf("reading the price of a GPU-hour: %w", err)
	}
	if len(ps) > 0 {
		price, rep.Currency = ps[0].Value, ps[0].Labels["currency"]
	}
	window := fmt.Sprintf("[%ds:%ds]", int64(o.Window.Seconds()), int64(o.Step.Seconds()))
	idle, err := q.Query(ctx, fmt.Sprintf("sum_over_time(%s%s) * %g", names.RecOwnerIdle, window, o.Step.Hours()))
	if err != nil {
		return Report{}, fmt.Errorf("reading the idle GPU-hours: %w", err)
	}
	for _, s := range idle {
		t, _ := reclaim.TargetFrom(labels.FromMap(s.Labels))
		for _, r := range rows(t) {
			r.IdleGPUHours += s.Value
			r.Cost += s.Value * price
		}
	}
	for _, a := range []struct {
		alert string
		count func(*Row)
	}{
		{names.AlertPackable, func(r *Row) { r.Packable++ }},
		{names.AlertMIGOversized, func(r *Row) { r.Oversized++ }},
	} {
		firing, err := q.Query(ctx, fmt.Sprintf(`ALERTS{alertname=%q,alertstate="firing",%s=%q}`, a.alert, names.LabelAudience, names.AudiencePeople))
		if err != nil {
			return Report{}, fmt.Errorf("reading %s: %w", a.alert, err)
		}
		for _, s := range firing {
			t, _ := reclaim.TargetFrom(labels.FromMap(s.Labels))
			for _, r := range rows(t) {
				a.count(r)
			}
		}
	}
	for _, r := range reclaims {
		if r.Created.Before(rep.From) || r.Created.After(rep.To) {
			continue
		}
		for _, x := range rows(r.Target) {
			switch {
			case r.State == reclaim.Done:
				x.Reclaims++
			case r.State == reclaim.Exempt && r.SnoozedBy() != "":
				x.Keeps++ // someone pressed keep
			case r.SnoozedBy() != "":
				x.Snoozes++
			}
		}
	}
	for _, r := range namespaces {
		rep.Namespaces = append(rep.Namespaces, *r)
	}
	for _, r := range owners {
		rep.Owners = append(rep.Owners, *r)
	}
	sortRows(rep.Namespaces)
	sortRows(rep.Owners)
	return rep, nil
}

// BareMetal names the namespace row of the owners outside Kubernetes.
const BareMetal = "(bare metal)"

// sortRows puts the most idle first.
func sortRows(rs []Row) {
	sort.Slice(rs, func(i, j int) bool {
		if rs[i].IdleGPUHours != rs[j].IdleGPUHours {
			return rs[i].IdleGPUHours > rs[j].IdleGPUHours
		}
		return rs[i].Name < rs[j].Name
	})
}

// Of is the part of the report one namespace's people read: its row and
// its owners'.
func (rep Report) Of(namespace string) Report {
	out := Report{From: rep.From, To: rep.To, Currency: rep.Currency}
	for _, r := range rep.Namespaces {
		if r.Name == namespace {
			out.Namespaces = append(out.Namespaces, r)
		}
	}
	for _, r := range rep.Owners {
		if r.Namespace == namespace {
			out.Owners = append(out.Owners, r)
		}
	}
	return out
}

// Text writes the report as aligned columns.
func (rep Report) Text(w io.Writer) error {
	fmt.Fprintf(w, "GPU waste from %s to %s\n", rep.From.UTC().Format("2006-01-02 15:04"), rep.To.UTC().Format("2006-01-02 15:04 MST"))
	for _, part := range []struct {
		title string
		rows  []Row
	}{{"By namespace", rep.Namespaces}, {"By owner", rep.Owners}} {
		fmt.Fprintf(w, "\n%s\n", part.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "\tidle GPU-hours\tcost (%s)\treclaims\tsnoozes\tkeeps\tcould share a GPU\tcould use a smaller slice\n", rep.Currency)
		for _, r := range part.rows {
			fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%d\t%d\t%d\t%d\t%d\n", r.Name, r.IdleGPUHours, r.Cost, r.Reclaims, r.Snoozes, r.Keeps, r.Packable, r.Oversized)
		}
		if len(part.rows) == 0 {
			fmt.Fprintln(tw, "(none)")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// String is the report as text.
func (rep Report) String() string {
	var b strings.Builder
	_ = rep.Text(&b) // a strings.Builder does not fail
	return b.String()
}

// Sender sends a message through the notifiers (reclaim.Engine).
type Sender interface {
	Announce(ctx context.Context, m reclaim.Message) bool
}

// Send sends the report of the week that ends at week (its key, so that
// a notifier that can look for what it sent does not send it twice): the
// whole of it to the admins, each namespace's part to its owner and
// channel, and each bare-metal user's row to them.
func Send(ctx context.Context, s Sender, rep Report, week string) {
	key := "report/" + week
	s.Announce(ctx, reclaim.Message{Kind: reclaim.MsgReport, Text: rep.String(), Key: key, Again: true})
	part := func(id string, t reclaim.Target, r Report) {
		s.Announce(ctx, reclaim.Message{Kind: reclaim.MsgReport, Reclaim: &reclaim.Reclaim{ID: key + "/" + id, Target: t},
			Text: r.String(), Key: key + "/" + id, Again: true})
	}
	for _, ns := range rep.Namespaces {
		if ns.Name != BareMetal {
			part(ns.Name, reclaim.Target{Namespace: ns.Name}, rep.Of(ns.Name))
		}
	}
	for _, o := range rep.Owners {
		if o.User != "" {
			part(o.Name, reclaim.Target{User: o.User}, Report{From: rep.From, To: rep.To, Currency: rep.Currency, Owners: []Row{o}})
		}
	}
}

// WeeklyJob sends the report when it is due (config.Report.Next), by the
// leader of the moment: it checks every minute, and a leader that takes
// over after the time waits for the next week, so that a week is not
// sent twice by two terms. build makes the report of the window.
func WeeklyJob(when config.Report, build func(ctx context.Context, window time.Duration) (Report, error), s Sender, logger *slog.Logger, now time.Time) lifecycle.Job {
	next := when.Next(now)
	return lifecycle.Job{Name: "weekly report", Every: time.Minute, Run: func(ctx context.Context, now time.Time) error {
		if now.Before(next) {
			return nil
		}
		week := next.UTC().Format("2006-01-02")
		next = when.Next(now)
		rep, err := build(ctx, DefaultWindow)
		if err != nil {
			return fmt.Errorf("building the report of the week ending %s: %w", week, err)
		}
		Send(ctx, s, rep, week)
		logger.Info("sent the weekly report", "week_ending", week, "namespaces", len(rep.Namespaces), "owners", len(rep.Owners))
		return nil
	}}
}
