package backtest

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/ruleeval"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Options say what to replay a history through.
type Options struct {
	// RuleFiles are the Prometheus rule files, as shipped.
	RuleFiles []string
	// Config is the reclaimer's configuration; its policies, exemptions,
	// rate limits and circuit breaker decide. Dry run is ignored: the
	// question is what the policy would have done.
	Config *config.Config
	// Dir is an empty folder for the TSDB.
	Dir string
	// RegretWindow: a reclaim after which the workload's activity came back
	// within it was a pause taken for an abandoned GPU. Default 30m.
	RegretWindow time.Duration
	// IdleThreshold is the activity at or under which a held step is idle,
	// and above which work came back. Default 0.05.
	IdleThreshold float64
	// RestoreOnDemand gives every policy whose action can be undone a
	// restore_when that returns a sample once the workload's recorded work
	// is back: a demand series (its Service's request rate) that rises with
	// its work. A regretted reclaim is then restored when its work returns.
	RestoreOnDemand bool
	// ColdStarts are how long a restored workload takes to serve again, by
	// its kind; default DefaultColdStarts. Its returning work waits for it.
	ColdStarts map[string]time.Duration
	Logger     *slog.Logger
}

// Result is what the policy did to each workload.
type Result struct {
	Start         time.Time
	Step          time.Duration
	Steps         int
	RegretWindow  time.Duration
	IdleThreshold float64
	Workloads     []WorkloadResult
	// States counts the reclaims by the state they ended in (done, cancelled, notified, ...).
	States map[string]int
}

// WorkloadResult is one workload's story.
type WorkloadResult struct {
	ID, Owner string
	// Held and Idle count the steps the history shows it holding its unit,
	// and holding it idle; Freed the held steps after a reclaim, until its
	// work came back. Reclaimable counts the idle steps after which work
	// did not come back within the regret window: what a policy that knew
	// the future could free without regret.
	Held, Idle, Freed, Reclaimable int
	// Span counts the steps from its first sample to its last: its time in
	// the history, reclaimed or not.
	Span int
	// ColdStart is how long it takes to serve again after a restore.
	ColdStart time.Duration
	// Warned lists the steps at which its owner was warned.
	Warned   []int
	Reclaims []Reclaimed
}

// Reclaimed is one action on a workload.
type Reclaimed struct {
	Action config.Action
	// At is the action's step; Returned the first step after it with work
	// (-1: none until the history ends); Freed the held steps between.
	// Restored is the step restore_when restored it at (-1: not restored).
	At, Returned, Freed, Restored int
	// Regret: the work came back within the regret window.
	Regret bool
}

// workloadState follows a workload through the replay.
type workloadState struct {
	gone    bool      // reclaimed, its work not back yet
	started time.Time // when it (last) started holding its unit
	res     WorkloadResult
}

// Run replays the history through the rules and the reclaimer's engine on
// a simulated clock. Each step: the workloads that still hold their unit
// show their series; the rules are evaluated; what Alertmanager would send
// the reclaimer (its copies of the alerts, firing and resolved) goes to the
// engine; the engine steps. An action takes the workload off its unit
// until its recorded work comes back; then it starts again.
func Run(ctx context.Context, h History, o Options) (*Result, error) {
	if o.RegretWindow == 0 {
		o.RegretWindow = 30 * time.Minute
	}
	if o.IdleThreshold == 0 {
		o.IdleThreshold = names.IdleThreshold
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	coldStarts := o.ColdStarts
	if coldStarts == nil {
		coldStarts = DefaultColdStarts
	}
	cfg := *o.Config
	cfg.DryRun = false
	cfg.Policies = append([]config.Policy(nil), o.Config.Policies...)
	for i := range cfg.Policies {
		cfg.Policies[i].DryRun = false
		if o.RestoreOnDemand && cfg.Policies[i].Restorable() {
			if err := cfg.Policies[i].SetRestoreWhen(demandQuery); err != nil {
				return nil, err
			}
		}
	}

	rp, err := NewReplayer(&h, o.Dir, o.RuleFiles...)
	if err != nil {
		return nil, err
	}
	defer rp.Close()

	b := &bench{h: &h, o: o, byKey: map[string]int{}, byUUID: map[string][]int{}, firing: map[string]notification.Alert{}}
	b.states = make([]workloadState, len(h.Workloads))
	b.nextBusy = make([][]int, len(h.Workloads))
	for i, w := range h.Workloads {
		b.nextBusy[i] = nextBusy(&w, o.IdleThreshold)
		b.byKey[w.key] = i
		uuid, _, _ := strings.Cut(w.key, "\xff")
		b.byUUID[uuid] = append(b.byUUID[uuid], i)
		b.states[i].res = WorkloadResult{ID: w.ID, Owner: w.Owner, Span: w.span(), ColdStart: coldStarts[w.TopOwner.Kind]}
	}
	eng, err := lifecycle.New(lifecycle.Options{
		Config: &cfg, Store: &memStore{}, Checker: b, Inspector: b, Actor: b, Restorer: b,
		Notifiers: []reclaim.Notifier{b}, Clock: b.now, Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	steps := h.Steps()
	holds := func(w int) bool { return !b.states[w].gone }
	for i := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.step, b.clock = i, h.At(i)
		b.account(i)
		if o.RestoreOnDemand {
			// Every restore interval falls within a step of the history.
			eng.RestoreOnDemand(ctx, b)
		}
		alerts, err := rp.Step(i, holds)
		if err != nil {
			return nil, err
		}
		if err := b.notify(eng, alerts); err != nil {
			return nil, err
		}
		// The reclaimer steps every second: what a warning makes due (a
		// grace of 0s) happens within the same minute.
		eng.Step(ctx)
		eng.Step(ctx)
	}
	res := &Result{Start: h.Start, Step: h.Step, Steps: steps, RegretWindow: o.RegretWindow, IdleThreshold: o.IdleThreshold, States: map[string]int{}}
	for i := range b.states {
		res.Workloads = append(res.Workloads, b.states[i].res)
	}
	for _, r := range eng.List() {
		res.States[string(r.State)]++
	}
	return res, nil
}

// bench stands in for everything around the engine: Alertmanager, the
// cluster and the nodes, and the owners' inboxes.
type bench struct {
	h     *History
	o     Options
	byKey map[string]int
	// byUUID are the workloads on each unit, for the demand query.
	byUUID map[string][]int
	states []workloadState
	// nextBusy is, per workload and step, the next step with work (-1: none).
	nextBusy [][]int

	mu     sync.Mutex
	step   int
	clock  time.Time
	firing map[string]notification.Alert // by fingerprint: what Alertmanager holds as firing
}

func (b *bench) now() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clock
}

// account counts the step for each workload and brings back the reclaimed
// ones whose work came back.
func (b *bench) account(i int) {
	for wi := range b.h.Workloads {
		w, st := &b.h.Workloads[wi], &b.states[wi]
		if st.started.IsZero() && w.present(i) {
			st.started = b.h.At(i)
		}
		if st.gone {
			last := &st.res.Reclaims[len(st.res.Reclaims)-1]
			if w.busyAt(i, b.o.IdleThreshold) {
				st.gone, st.started = false, b.h.At(i)
				last.Returned = i
				last.Regret = time.Duration(i-last.At)*b.h.Step <= b.o.RegretWindow
			} else if w.present(i) {
				last.Freed++
				st.res.Freed++
			}
		}
		if w.present(i) {
			st.res.Held++
			if w.idleAt(i, b.o.IdleThreshold) {
				st.res.Idle++
				if next := b.nextBusy[wi][i]; next < 0 || time.Duration(next-i)*b.h.Step > b.o.RegretWindow {
					st.res.Reclaimable++
				}
			}
		}
	}
}

// notify sends the engine what Alertmanager would: the reclaimer's copies
// of the alerts that started firing, and of those that stopped.
func (b *bench) notify(eng *lifecycle.Engine, alerts []ruleeval.Alert) error {
	now := b.now()
	current := map[string]notification.Alert{}
	for _, a := range alerts {
		if !a.Firing {
			continue
		}
		if aud := a.Labels.Get(names.LabelAudience); aud != "" && aud != names.AudienceReclaimer {
			continue
		}
		fp := model.LabelSet(toLabelSet(a.Labels.Map())).Fingerprint().String()
		current[fp] = notification.Alert{Status: "firing", Labels: a.Labels, Annotations: a.Annotations, StartsAt: a.ActiveAt, Fingerprint: fp}
	}
	var send []notification.Alert
	b.mu.Lock()
	for fp, a := range current {
		if old, ok := b.firing[fp]; !ok || !old.StartsAt.Equal(a.StartsAt) {
			send = append(send, a)
		}
	}
	for fp, a := range b.firing {
		if _, ok := current[fp]; !ok {
			a.Status, a.EndsAt = "resolved", now
			send = append(send, a)
		}
	}
	b.firing = current
	b.mu.Unlock()
	if len(send) == 0 {
		return nil
	}
	sort.Slice(send, func(i, j int) bool { return send[i].Fingerprint < send[j].Fingerprint })
	if _, err := eng.Ingest(send); err != nil {
		return err
	}
	return eng.Flush() // replayed time waits for no write
}

func toLabelSet(m map[string]string) model.LabelSet {
	ls := make(model.LabelSet, len(m))
	for k, v := range m {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls
}

func (b *bench) workload(t reclaim.Target) (int, bool) {
	i, ok := b.byKey[ownerKey(t.UUID, t.Namespace, t.Pod, t.User, t.SlurmJob)]
	return i, ok
}

// Check answers as Alertmanager would: the episode fires or is gone.
func (b *bench) Check(_ context.Context, r *reclaim.Reclaim) (reclaim.AlertCheck, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.firing[r.Fingerprint]; ok && a.StartsAt.Equal(r.StartsAt) {
		return reclaim.AlertCheck{Status: reclaim.AlertActive}, nil
	}
	return reclaim.AlertCheck{Status: reclaim.AlertGone}, nil
}

func (b *bench) Kept(context.Context, reclaim.Target) (bool, string, error) { return false, "", nil }

func (b *bench) Started(_ context.Context, t reclaim.Target) (time.Time, error) {
	i, ok := b.workload(t)
	if !ok || b.states[i].gone {
		return time.Time{}, reclaim.ErrGone
	}
	return b.states[i].started, nil
}

func (b *bench) TopOwner(_ context.Context, t reclaim.Target) (reclaim.TopOwner, error) {
	if i, ok := b.workload(t); ok {
		return b.h.Workloads[i].TopOwner, nil
	}
	return reclaim.TopOwner{}, nil
}

// Act takes the workload off its unit.
func (b *bench) Act(_ context.Context, action config.Action, r *reclaim.Reclaim) (reclaim.Result, error) {
	i, ok := b.workload(r.Target)
	if !ok {
		return reclaim.Result{}, fmt.Errorf("no workload in the history for %s", r.Target.Holder())
	}
	st := &b.states[i]
	if st.gone {
		return reclaim.Result{}, reclaim.ErrGone
	}
	st.gone = true
	st.res.Reclaims = append(st.res.Reclaims, Reclaimed{Action: action, At: b.step, Returned: -1, Restored: -1})
	res := reclaim.Result{Detail: string(action)}
	if c := b.h.Workloads[i].TopOwner; c.Stop == reclaim.StopScale || c.Stop == reclaim.StopPatch {
		res.Stopped = &reclaim.Stopped{APIVersion: c.APIVersion, Kind: c.Kind, Namespace: c.Namespace, Name: c.Name, Stop: c.Stop,
			PreviousReplicas: c.Replicas, StopVerb: c.Stopped, RestoreVerb: "resumed"}
	}
	return res, nil
}

// demandQuery is the restore_when the backtest gives with RestoreOnDemand:
// Demand answers it from the history.
const demandQuery = `gpureclaim_backtest_demand{uuid="{{ .uuid }}"}`

var demandUUID = regexp.MustCompile(`^gpureclaim_backtest_demand\{uuid="(.*)"\}$`)

// Demand answers demandQuery: a workload reclaimed from the unit has its
// work back and is not restored yet.
func (b *bench) Demand(_ context.Context, query string) (bool, error) {
	m := demandUUID.FindStringSubmatch(query)
	if m == nil {
		return false, fmt.Errorf("the backtest answers only its own demand query, not %q", query)
	}
	for _, i := range b.byUUID[m[1]] {
		if rs := b.states[i].res.Reclaims; len(rs) > 0 && rs[len(rs)-1].Returned >= 0 && rs[len(rs)-1].Restored < 0 {
			return true, nil
		}
	}
	return false, nil
}

// Restore records when a restore brought the workload back.
func (b *bench) Restore(_ context.Context, r *reclaim.Reclaim) error {
	i, ok := b.workload(r.Target)
	if !ok {
		return fmt.Errorf("no workload in the history for %s", r.Target.Holder())
	}
	rs := b.states[i].res.Reclaims
	if len(rs) == 0 {
		return reclaim.ErrNotRestorable
	}
	rs[len(rs)-1].Restored = b.step
	return nil
}

// The bench is the owners' only notifier: it records the warnings.
func (b *bench) Name() string   { return "backtest" }
func (b *bench) Blocking() bool { return false }
func (b *bench) Send(_ context.Context, m reclaim.Message, _ map[string]string) (map[string]string, []string, error) {
	if m.Kind == reclaim.MsgWarning && m.Reclaim != nil {
		if i, ok := b.workload(m.Reclaim.Target); ok {
			b.states[i].res.Warned = append(b.states[i].res.Warned, b.step)
		}
	}
	return nil, []string{"backtest"}, nil
}

// memStore keeps the engine's reclaims in memory: nothing outlives a run.
type memStore struct {
	mu sync.Mutex
	rs map[string]*reclaim.Reclaim
}

func (s *memStore) Load() ([]*reclaim.Reclaim, error) { return nil, nil }

func (s *memStore) Write(rs []*reclaim.Reclaim, _ []reclaim.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rs == nil {
		s.rs = map[string]*reclaim.Reclaim{}
	}
	for _, r := range rs {
		s.rs[r.ID] = r
	}
	return nil
}

func (s *memStore) Audit(int) ([]reclaim.Event, error) { return nil, nil }
func (s *memStore) Prune(time.Time) (int, error)       { return 0, nil }
func (s *memStore) Close() error                       { return nil }
