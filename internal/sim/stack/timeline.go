package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
)

// Timeline prints what happens, as it happens: alerts firing, owners
// warned, reclaims done or cancelled, GPUs freed.
type Timeline struct {
	s      *Stack
	out    io.Writer
	start  time.Time
	alerts map[string]bool
	states map[string]string
	freed  map[string]bool
}

// NewTimeline starts the clock now.
func (s *Stack) NewTimeline(out io.Writer) *Timeline {
	return &Timeline{s: s, out: out, start: time.Now(), alerts: map[string]bool{}, states: map[string]string{}, freed: map[string]bool{}}
}

func (t *Timeline) say(format string, args ...any) {
	el := time.Since(t.start)
	fmt.Fprintf(t.out, "%6.1fs  (scenario %5.1f min)  %s\n", el.Seconds(), el.Minutes()*t.s.o.Speed, fmt.Sprintf(format, args...))
}

// Run prints until ctx ends.
func (t *Timeline) Run(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		t.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Query runs an instant PromQL query and returns each series' labels.
func (s *Stack) Query(ctx context.Context, q string) ([]map[string]string, error) {
	return s.QueryAt(ctx, q, time.Time{})
}

// QueryAt runs an instant PromQL query at a past time (now when zero).
func (s *Stack) QueryAt(ctx context.Context, q string, at time.Time) ([]map[string]string, error) {
	return QueryAt(ctx, s.PrometheusURL, q, at)
}

// QueryAt runs an instant query on the query API at base (Prometheus, or
// a fleet's engine) at a past time (now when zero), and returns each
// series' labels.
func QueryAt(ctx context.Context, base, q string, at time.Time) ([]map[string]string, error) {
	v := url.Values{"query": {q}}
	if !at.IsZero() {
		v.Set("time", seconds(at))
	}
	return series(ctx, base+"/api/v1/query?"+v.Encode(), q)
}

// QueryRange runs a range query, as a dashboard panel does, and returns
// each series' labels.
func QueryRange(ctx context.Context, base, q string, from, to time.Time, step time.Duration) ([]map[string]string, error) {
	v := url.Values{"query": {q}, "start": {seconds(from)}, "end": {seconds(to)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}}
	return series(ctx, base+"/api/v1/query_range?"+v.Encode(), q)
}

func seconds(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }

// series asks a query API and returns the labels of each series answered.
func series(ctx context.Context, u, q string) ([]map[string]string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	var out []map[string]string
	for _, x := range r.Data.Result {
		out = append(out, x.Metric)
	}
	return out, nil
}

// holder names who holds a reclaim's unit, for the timeline.
func holder(r *v1alpha1.GPUReclaim) string {
	t := r.Spec.Target
	switch {
	case t.Pod != "":
		return t.Namespace + "/" + t.Pod
	case t.User != "":
		return "user " + t.User
	}
	return "the tenants of " + t.UUID
}

// Reclaims lists the reclaimer's reclaims, as its API serves them.
func (s *Stack) Reclaims(ctx context.Context) ([]v1alpha1.GPUReclaim, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.ReclaimerURL+"/api/v1/reclaims", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l v1alpha1.GPUReclaimList
	return l.Items, json.NewDecoder(resp.Body).Decode(&l)
}

func (t *Timeline) poll(ctx context.Context) {
	if alerts, err := t.s.Query(ctx, `ALERTS{alertstate="firing",audience="reclaimer"}`); err == nil {
		sort.Slice(alerts, func(i, j int) bool { return alerts[i]["uuid"] < alerts[j]["uuid"] })
		for _, a := range alerts {
			key := a["alertname"] + a["uuid"] + a["pod"] + a["user"]
			if t.alerts[key] {
				continue
			}
			t.alerts[key] = true
			who := a["namespace"] + "/" + a["pod"]
			if a["pod"] == "" {
				who = "user " + a["user"]
				if a["user"] == "" {
					who = "several tenants"
				}
			}
			t.say("%-20s %s on %s, held by %s", a["alertname"]+" fired:", a["uuid"], a["node"], who)
		}
	}
	rs, err := t.s.Reclaims(ctx)
	if err != nil {
		return
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].Status.Created.Before(rs[j].Status.Created) })
	for i := range rs {
		r, st := &rs[i], &rs[i].Status
		prev := t.states[r.Name]
		now := string(st.State)
		if now == "pending" && (st.Warning == nil || !st.Warning.Sent) {
			now = "deciding"
		}
		if prev == now {
			t.freedCheck(ctx, r)
			continue
		}
		t.states[r.Name] = now
		switch now {
		case "pending":
			actAt := ""
			if st.ActAt != nil {
				actAt = st.ActAt.Local().Format("15:04:05")
			}
			t.say("%-20s %s: %s at %s", "owner warned:", holder(r), st.Action, actAt)
		case "notified":
			t.say("%-20s %s told about %s", "owner notified:", holder(r), r.Spec.Target.Alertname)
		case "snoozed":
			t.say("%-20s %s: %s", "snoozed:", holder(r), st.Reason)
		case "done":
			t.say("%-20s %s: %s", "reclaimed:", holder(r), st.Detail)
		case "cancelled", "exempt", "failed", "dry_run", "not_released":
			t.say("%-20s %s: %s", now+":", holder(r), st.Reason)
		}
	}
}

// freedCheck says when a reclaimed unit has no owner any more.
func (t *Timeline) freedCheck(ctx context.Context, r *v1alpha1.GPUReclaim) {
	u := r.Spec.Target
	if r.Status.State != "done" || t.freed[u.UUID] {
		return
	}
	owners, err := t.s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_info{uuid=%q}`, u.UUID))
	if err == nil && len(owners) == 0 {
		t.freed[u.UUID] = true
		t.say("%-20s %s on %s is free for the next job", "GPU freed:", u.UUID, u.Node)
	}
}
