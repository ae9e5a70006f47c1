// Package reclaimtest holds builders for the reclaimer's tests: a clock, a
// notifier and an actor that record what they are asked, alerts as
// Alertmanager sends them, and configs.
package reclaimtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/fakeclock"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// T0 is the start of every test's clock.
var T0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// NewClock starts a clock at T0.
func NewClock() *fakeclock.Clock { return fakeclock.New(T0) }

// Config parses a config, with secrets written to a temporary folder; the
// webhook token is "t0ken".
func Config(t testing.TB, yaml string) *config.Config {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte("t0ken\n"), 0o600))
	if !regexp.MustCompile(`(?m)^webhook:`).MatchString(yaml) {
		yaml = "webhook: {bearer_token_file: token}\n" + yaml
	}
	if !regexp.MustCompile(`(?m)^web:`).MatchString(yaml) {
		yaml = "web: {auth: {none: true}}\n" + yaml
	}
	if !regexp.MustCompile(`(?m)^alertmanager:`).MatchString(yaml) {
		yaml = "alertmanager: {url: \"http://127.0.0.1:9093\"}\n" + yaml
	}
	c, err := config.Parse([]byte(yaml), dir)
	require.NoError(t, err)
	return c
}

// Alert builds an alert as Alertmanager sends it. labels are pairs.
// A label named twice takes the later value.
func Alert(status string, startsAt time.Time, pairs ...string) notification.Alert {
	m := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	l := labels.FromMap(m)
	return notification.Alert{Status: status, Labels: l, Annotations: labels.FromStrings("summary", "s", "description", "d"), StartsAt: startsAt, Fingerprint: reclaim.Fingerprint(l)}
}

// IdlePod is GPUIdle for a pod on a whole GPU.
func IdlePod(status string, startsAt time.Time, ns, pod string, extra ...string) notification.Alert {
	return Alert(status, startsAt, append([]string{"alertname", "GPUIdle", "uuid", "GPU-" + pod, "gpu_uuid", "GPU-" + pod, "node", "n1", "kind", "gpu",
		"namespace", ns, "pod", pod, "container", "c", "keep", "false", "action", "evict", "signal", "sm_active", "severity", "warning"}, extra...)...)
}

// IdleProcess is GPUIdle for a bare-metal user's process.
func IdleProcess(status string, startsAt time.Time, user string, extra ...string) notification.Alert {
	return Alert(status, startsAt, append([]string{"alertname", "GPUIdle", "uuid", "GPU-" + user, "gpu_uuid", "GPU-" + user, "node", "n1", "kind", "gpu",
		"user", user, "keep", "false", "action", "kill", "signal", "sm_active", "severity", "warning"}, extra...)...)
}

// Notification is the body of one Alertmanager webhook notification
// (payload version 4) of n firing GPUIdle alerts, each for its own pod,
// eight GPUs to a node and fifty namespaces, as the large-notification
// benchmarks send it.
func Notification(tb testing.TB, n int, startsAt time.Time) []byte {
	alerts := make([]map[string]any, n)
	for i := range alerts {
		labels := map[string]string{"alertname": "GPUIdle", "audience": "reclaimer", "uuid": fmt.Sprintf("GPU-%08d", i), "gpu_uuid": fmt.Sprintf("GPU-%08d", i),
			"node": fmt.Sprintf("node-%d", i/8), "kind": "gpu", "namespace": fmt.Sprintf("ns-%d", i%50), "pod": fmt.Sprintf("pod-%d", i), "container": "c",
			"keep": "false", "action": "evict", "signal": "sm_active", "severity": "warning"}
		alerts[i] = map[string]any{"status": "firing", "labels": labels, "annotations": map[string]string{"summary": "idle", "description": "the GPU has been idle for 1h"},
			"startsAt": startsAt, "endsAt": time.Time{}, "fingerprint": fmt.Sprintf("%016x", i)}
	}
	body, err := json.Marshal(map[string]any{"version": "4", "status": "firing", "receiver": "gpureclaim", "groupKey": "{}:{}", "alerts": alerts})
	require.NoError(tb, err)
	return body
}

// Notifier records messages; Fail makes it fail.
type Notifier struct {
	mu       sync.Mutex
	Sent     []reclaim.Message
	Fail     error
	NotBlock bool
	name     string
}

func NewNotifier(name string) *Notifier { return &Notifier{name: name} }

func (n *Notifier) Name() string   { return n.name }
func (n *Notifier) Blocking() bool { return !n.NotBlock }

func (n *Notifier) Send(_ context.Context, m reclaim.Message, _ map[string]string) (map[string]string, []string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.Fail != nil {
		return nil, nil, n.Fail
	}
	n.Sent = append(n.Sent, m)
	return map[string]string{"ref": fmt.Sprint(len(n.Sent))}, []string{n.name}, nil
}

// Kinds lists the kinds of the messages sent, in order.
func (n *Notifier) Kinds() []reclaim.MessageKind {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []reclaim.MessageKind
	for _, m := range n.Sent {
		out = append(out, m.Kind)
	}
	return out
}

// Text is the text of the messages of a kind sent, one a line.
func (n *Notifier) Text(kind reclaim.MessageKind) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, m := range n.Sent {
		if m.Kind == kind {
			out = append(out, m.Text)
		}
	}
	return strings.Join(out, "\n")
}

// Actor records actions; Err is returned (and then cleared, if Once).
type Actor struct {
	mu    sync.Mutex
	Calls []string
	Err   error
	Once  bool
	// RestoreErr is what every restore returns.
	RestoreErr error
	// PIDs is what a kill plans to end.
	PIDs []int
}

func (a *Actor) Act(_ context.Context, action config.Action, r *reclaim.Reclaim) (reclaim.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.Calls = append(a.Calls, string(action)+" "+r.Target.Holder())
	err := a.Err
	if a.Once {
		a.Err = nil
	}
	res := reclaim.Result{Detail: "did " + string(action)}
	if c := r.TopOwner; c != nil && err == nil && (action == config.ActionScaleDown || action == config.ActionStop) {
		// What a restore brings back, as the cluster actor records it.
		res.Stopped = &reclaim.Stopped{APIVersion: c.APIVersion, Kind: c.Kind, Namespace: c.Namespace, Name: c.Name, Stop: c.Stop,
			PreviousReplicas: c.Replicas, StopVerb: c.Stopped, RestoreVerb: "resumed"}
	}
	return res, err
}

// Plan answers PIDs, what a kill will end.
func (a *Actor) Plan(_ context.Context, action config.Action, _ *reclaim.Reclaim) (reclaim.Plan, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if action != config.ActionKill {
		return reclaim.Plan{}, nil
	}
	return reclaim.Plan{PIDs: a.PIDs}, nil
}

// Restore records a restore as "restore OWNER".
func (a *Actor) Restore(_ context.Context, r *reclaim.Reclaim) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.Calls = append(a.Calls, "restore "+r.Target.Holder())
	return a.RestoreErr
}

func (a *Actor) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.Calls)
}

// Checker answers Alertmanager re-checks.
type Checker struct {
	mu     sync.Mutex
	Status reclaim.AlertStatus
	Why    string
	Until  time.Time
	Err    error
}

func (c *Checker) Check(context.Context, *reclaim.Reclaim) (reclaim.AlertCheck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return reclaim.AlertCheck{Status: c.Status, Reason: c.Why, Until: c.Until}, c.Err
}

// Set changes the answer.
func (c *Checker) Set(st reclaim.AlertStatus, why string, until time.Time) {
	c.mu.Lock()
	c.Status, c.Why, c.Until = st, why, until
	c.mu.Unlock()
}

// Inspector answers keep, start-time and controller lookups.
type Inspector struct {
	mu          sync.Mutex
	Keep        map[string]bool             // by owner
	Start       map[string]time.Time        // by owner
	Controllers map[string]reclaim.TopOwner // by owner; none is a bare pod
	// ControllerErr fails every top-owner lookup while set.
	ControllerErr error
	// Gone lists owners whose workload is gone (Started says ErrGone).
	Gone map[string]bool
}

func (i *Inspector) TopOwner(_ context.Context, t reclaim.Target) (reclaim.TopOwner, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.ControllerErr != nil {
		return reclaim.TopOwner{}, i.ControllerErr
	}
	return i.Controllers[t.Holder()], nil
}

// SetKeep marks an owner kept, or not, from now on.
func (i *Inspector) SetKeep(owner string, kept bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.Keep == nil {
		i.Keep = map[string]bool{}
	}
	i.Keep[owner] = kept
}

func (i *Inspector) Kept(_ context.Context, t reclaim.Target) (bool, string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.Keep[t.Holder()], "the pod is annotated gpureclaim.io/keep", nil
}

func (i *Inspector) Started(_ context.Context, t reclaim.Target) (time.Time, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.Gone[t.Holder()] {
		return time.Time{}, reclaim.ErrGone
	}
	if s, ok := i.Start[t.Holder()]; ok {
		return s, nil
	}
	return T0.Add(-24 * time.Hour), nil
}

// Verifier answers what the world shows after an action: Held keeps the
// unit held (the controller ignored the stop), NotRunning keeps a restored
// workload down; Why is what the controller says.
type Verifier struct {
	mu                     sync.Mutex
	Held, NotRunning       bool
	Why                    string
	Err                    error
	ReleaseLooks, RunLooks int
}

func (v *Verifier) Released(context.Context, *reclaim.Reclaim) (reclaim.Release, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ReleaseLooks++
	return reclaim.Release{Done: !v.Held && v.Err == nil, Why: v.Why}, v.Err
}

func (v *Verifier) Running(context.Context, *reclaim.Reclaim) (reclaim.Release, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.RunLooks++
	return reclaim.Release{Done: !v.NotRunning, Why: v.Why}, nil
}

// Set changes what the world shows.
func (v *Verifier) Set(held, notRunning bool, why string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.Held, v.NotRunning, v.Why = held, notRunning, why
}
