package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"time"
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
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.PrometheusURL+"/api/v1/query?query="+url.QueryEscape(q), nil)
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

// Reclaim is the part of a reclaim the timeline and the tests read.
type Reclaim struct {
	ID     string    `json:"id"`
	State  string    `json:"state"`
	Reason string    `json:"reason"`
	Action string    `json:"action"`
	Detail string    `json:"detail"`
	ActAt  time.Time `json:"act_at"`
	Target struct {
		Alertname, UUID, Node, Namespace, Pod, User, Kind string
		MIGProfile                                        string `json:"mig_profile"`
		SlurmJob                                          string `json:"slurm_job"`
	} `json:"target"`
	Warning struct {
		Sent bool              `json:"sent"`
		At   time.Time         `json:"at"`
		Refs map[string]string `json:"refs"`
	} `json:"warning"`
	ActedAt    time.Time `json:"acted_at"`
	ReleasedAt time.Time `json:"released_at"`
	Created    time.Time `json:"created"`
}

func (r Reclaim) owner() string {
	switch {
	case r.Target.Pod != "":
		return r.Target.Namespace + "/" + r.Target.Pod
	case r.Target.User != "":
		return "user " + r.Target.User
	}
	return "the tenants of " + r.Target.UUID
}

// Reclaims lists the reclaimer's reclaims.
func (s *Stack) Reclaims(ctx context.Context) ([]Reclaim, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.ReclaimerURL+"/api/v1/reclaims", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l struct {
		Reclaims []Reclaim `json:"reclaims"`
	}
	return l.Reclaims, json.NewDecoder(resp.Body).Decode(&l)
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
	sort.Slice(rs, func(i, j int) bool { return rs[i].Created.Before(rs[j].Created) })
	for _, r := range rs {
		prev := t.states[r.ID]
		now := r.State
		if r.State == "pending" && !r.Warning.Sent {
			now = "deciding"
		}
		if prev == now {
			t.freedCheck(ctx, r)
			continue
		}
		t.states[r.ID] = now
		switch now {
		case "pending":
			t.say("%-20s %s: %s at %s", "owner warned:", r.owner(), r.Action, r.ActAt.Local().Format("15:04:05"))
		case "notified":
			t.say("%-20s %s told about %s", "owner notified:", r.owner(), r.Target.Alertname)
		case "snoozed":
			t.say("%-20s %s: %s", "snoozed:", r.owner(), r.Reason)
		case "done":
			t.say("%-20s %s: %s", "reclaimed:", r.owner(), r.Detail)
		case "cancelled", "exempt", "failed", "dry_run", "not_released":
			t.say("%-20s %s: %s", now+":", r.owner(), r.Reason)
		}
	}
}

// freedCheck says when a reclaimed unit has no owner any more.
func (t *Timeline) freedCheck(ctx context.Context, r Reclaim) {
	if r.State != "done" || t.freed[r.Target.UUID] {
		return
	}
	owners, err := t.s.Query(ctx, fmt.Sprintf(`gpureclaim_unit_owner_info{uuid=%q}`, r.Target.UUID))
	if err == nil && len(owners) == 0 {
		t.freed[r.Target.UUID] = true
		t.say("%-20s %s on %s is free for the next job", "GPU freed:", r.Target.UUID, r.Target.Node)
	}
}
