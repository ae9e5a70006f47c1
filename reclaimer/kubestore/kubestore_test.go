package kubestore_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/testkit/kubetest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	"github.com/gpureclaim/gpureclaim/reclaimer/kubestore"
	"github.com/gpureclaim/gpureclaim/reclaimer/notification"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func reclaimOf(id, pod string, st reclaim.State) *reclaim.Reclaim {
	return &reclaim.Reclaim{
		ID: id, Fingerprint: strings.Split(id, "-")[0], StartsAt: t0, Policy: "idle", Action: "scale_down", State: st, Created: t0, Updated: t0,
		ActAt:  t0.Add(15 * time.Minute),
		Labels: labels.FromStrings("alertname", "GPUIdle", "namespace", "ml", "pod", pod),
		Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-" + pod, Node: "n1", Kind: "gpu", Namespace: "ml", Pod: pod},
	}
}

// The store on a real apiserver, with the reclaimer's own Role: what one
// replica writes the next one loads, the audit trail comes back in order,
// a replica that lost the lease cannot overwrite the leader's writes,
// pruning deletes what ended, a Slack signature is accepted once,
// kubectl lists the reclaims with their state, and a GPUReclaim whose
// status was never written is completed by the next write.
func TestStore(t *testing.T) {
	cl, _ := apiserver(t)
	ns := deploy.Namespace
	rc := cl.RESTConfig(kubetest.ReclaimerToken)

	leader, err := kubestore.New(rc, ns, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	require.NoError(t, leader.Ready())
	gone := *rc
	gone.Host = "https://127.0.0.1:1"
	unreachable, err := kubestore.New(&gone, ns, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	require.ErrorContains(t, unreachable.Ready(), "the store's API server does not answer", "no API server: not ready")
	loaded, err := leader.Load()
	require.NoError(t, err)
	require.Empty(t, loaded)

	a := reclaimOf("2ec3c8d58a8a0c69-1772445600", "chat-0", reclaim.Pending)
	b := reclaimOf("7f00aa11bb22cc33-1772445600", "nb-0", reclaim.Pending)
	ev := func(r *reclaim.Reclaim, kind string, at time.Duration) reclaim.Event {
		return reclaim.Event{Time: t0.Add(at), Reclaim: r.ID, Kind: kind, Target: r.Target.Unit(), Actor: "reclaimer"}
	}
	require.NoError(t, leader.Write([]*reclaim.Reclaim{a, b}, []reclaim.Event{ev(a, "warned", 0), ev(b, "warned", 0)}))
	a.State, a.ActedAt, a.Reason = reclaim.Done, t0.Add(15*time.Minute), "Deployment ml/chat scaled down"
	require.NoError(t, leader.Write([]*reclaim.Reclaim{a}, []reclaim.Event{ev(a, "acting", 15*time.Minute), ev(a, "done", 15*time.Minute)}))

	// The next leader starts where this one stopped.
	next, err := kubestore.New(rc, ns, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	loaded, err = next.Load()
	require.NoError(t, err)
	require.Len(t, loaded, 2)
	byID := map[string]*reclaim.Reclaim{}
	for _, r := range loaded {
		byID[r.ID] = r
	}
	require.Equal(t, reclaim.Done, byID[a.ID].State)
	require.True(t, byID[a.ID].ActedAt.Equal(a.ActedAt))
	require.Equal(t, a.Target, byID[a.ID].Target)
	require.Equal(t, reclaim.Pending, byID[b.ID].State)
	audit, err := next.Audit(10)
	require.NoError(t, err)
	var kinds []string
	for _, e := range audit {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{"done", "acting", "warned", "warned"}, kinds, "newest first; within an instant, the later written first")

	// The old leader, which missed the new one's write, is refused.
	b.State = reclaim.Snoozed
	require.NoError(t, next.Write([]*reclaim.Reclaim{b}, []reclaim.Event{ev(b, "snoozed", 5*time.Minute)}))
	stale := *b
	stale.State = reclaim.Done
	err = leader.Write([]*reclaim.Reclaim{&stale}, nil)
	var conflict *reclaim.ConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, reclaim.Snoozed, conflict.Stored.State, "what the store holds comes back, to go on from")
	again, err := kubestore.New(rc, ns, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	loaded, err = again.Load()
	require.NoError(t, err)
	for _, r := range loaded {
		if r.ID == b.ID {
			require.Equal(t, reclaim.Snoozed, r.State, "the snooze holds")
		}
	}

	// kubectl lists them with their state, holder and action.
	out, err := exec.Command(tooltest.Bin(t, "kubectl"), "--kubeconfig", cl.Kubeconfig, "get", "gpureclaims", "-n", ns).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Regexp(t, `^NAME\s+STATE\s+HOLDER\s+POLICY\s+ACTION\s+ACT AT\s+AGE$`, lines[0])
	require.Len(t, lines, 3)
	require.Regexp(t, `^2ec3c8d58a8a0c69-1772445600\s+done\s+ml/chat-0\s+idle\s+scale_down\s`, lines[1])
	require.Regexp(t, `^7f00aa11bb22cc33-1772445600\s+snoozed\s+ml/nb-0\s+idle\s+scale_down\s`, lines[2])
	out, err = exec.Command(tooltest.Bin(t, "kubectl"), "--kubeconfig", cl.Kubeconfig, "get", "gpureclaims", "-n", ns, "--field-selector", "status.state=snoozed", "-o", "name").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "gpureclaim.gpureclaim.io/7f00aa11bb22cc33-1772445600\n", string(out))

	// kubectl waits on its conditions: a is released, b (snoozed) not yet.
	out, err = exec.Command(tooltest.Bin(t, "kubectl"), "--kubeconfig", cl.Kubeconfig, "wait", "-n", ns, "--for=condition=Released", "--timeout=60s", "gpureclaim/"+a.ID).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "condition met")
	out, err = exec.Command(tooltest.Bin(t, "kubectl"), "--kubeconfig", cl.Kubeconfig, "get", "-n", ns, "gpureclaim/"+b.ID,
		"-o", `jsonpath={range .status.conditions[*]}{.type}={.status}/{.reason} {end}`).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "Warned=False/NotDelivered Acting=False/Snoozed Released=Unknown/Snoozed ", string(out))

	// Pruning deletes what ended and was told, before the cut-off.
	a.Final.Sent, a.Closed = true, t0.Add(16*time.Minute)
	require.NoError(t, next.Write([]*reclaim.Reclaim{a}, nil))
	n, err := next.Prune(t0.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	admin, err := kubestoreAdmin(cl)
	require.NoError(t, err)
	list, err := admin.Resource(kubestore.GVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)
	require.Equal(t, b.ID, list.Items[0].GetName())

	// A signed Slack request is accepted once, by any replica.
	now := time.Now()
	first, err := next.FirstSight("v0=abc", now, now.Add(5*time.Minute))
	require.NoError(t, err)
	require.True(t, first)
	first, err = again.FirstSight("v0=abc", now, now.Add(5*time.Minute))
	require.NoError(t, err)
	require.False(t, first, "a replay, on the other replica")
	first, err = again.FirstSight("v0=abc", now.Add(6*time.Minute), now.Add(11*time.Minute))
	require.NoError(t, err)
	require.True(t, first, "expired: a new request")

	// A GPUReclaim created, its status never written (its writer
	// stopped in between), holds no decision: it is not loaded, and the
	// next write of its reclaim completes it.
	createWithoutStatus := func(r *reclaim.Reclaim) {
		g := reclaim.ToAPI(r, nil)
		g.Namespace, g.Status = ns, v1alpha1.GPUReclaimStatus{}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
		require.NoError(t, err)
		_, err = admin.Resource(kubestore.GVR).Namespace(ns).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	c := reclaimOf("5c00aa11bb22cc33-1772445600", "half-0", reclaim.Pending)
	createWithoutStatus(c)
	fresh, err := kubestore.New(rc, ns, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	loaded, err = fresh.Load()
	require.NoError(t, err)
	require.Len(t, loaded, 1, "the one without a status is passed over")
	require.NoError(t, fresh.Write([]*reclaim.Reclaim{c}, []reclaim.Event{ev(c, "warned", 0)}))
	loaded, err = again.Load()
	require.NoError(t, err)
	require.Len(t, loaded, 2, "completed by the next write")
	// One whose reclaim is never written again goes when it is pruned.
	orphan := reclaimOf("6d00aa11bb22cc33-1772445600", "orphan-0", reclaim.Pending)
	createWithoutStatus(orphan)
	_, err = again.Load()
	require.NoError(t, err)
	n, err = again.Prune(time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Zero(t, n, "created within the retention")
	n, err = again.Prune(time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the one without a status, and nothing that has not ended")
	_, err = admin.Resource(kubestore.GVR).Namespace(ns).Get(context.Background(), orphan.ID, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)
}

// The chart's fence on a real apiserver: a GPUReclaim is written only with
// the Lease's current term; a replica still writing with an older one (it
// was paused past the Lease, and another took it) is refused, whether it
// creates a GPUReclaim or writes its status, as one without an election
// is not.
func TestFence(t *testing.T) {
	cl, root := apiserver(t)
	fence, err := deploy.ReclaimerFence(root)
	require.NoError(t, err)
	cl.Apply(t, fence)

	ns := deploy.Namespace
	admin := cl.Client(t, kubetest.AdminToken)
	transitions := int32(2)
	_, err = admin.CoordinationV1().Leases(ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "gpureclaim-reclaimer", Namespace: ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr("reclaimer-b"), LeaseTransitions: &transitions},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	st, err := kubestore.New(cl.RESTConfig(kubetest.ReclaimerToken), ns, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	stale := reclaimOf("aa00000000000001-1772445600", "old-0", reclaim.Pending)
	stale.Fence = 2 // the term before: leaseTransitions 1
	require.Eventually(t, func() bool {
		return errors.Is(st.Write([]*reclaim.Reclaim{stale}, nil), reclaim.ErrNotLeader)
	}, 20*time.Second, 100*time.Millisecond, "the apiserver refuses the old term (once it has loaded the policy)")
	err = st.Write([]*reclaim.Reclaim{stale}, nil)
	require.ErrorContains(t, err, "gpureclaim.io/fence 2 is not the Lease term 3: another replica leads")

	current := reclaimOf("bb00000000000002-1772445600", "new-0", reclaim.Pending)
	current.Fence = 3
	require.NoError(t, st.Write([]*reclaim.Reclaim{current}, nil), "the current term writes")
	current.State = reclaim.Snoozed
	require.NoError(t, st.Write([]*reclaim.Reclaim{current}, nil))
	alone := reclaimOf("cc00000000000003-1772445600", "solo-0", reclaim.Pending)
	require.NoError(t, st.Write([]*reclaim.Reclaim{alone}, nil), "no token: one replica, no election")

	// The Lease changes hands: the status of a reclaim the last term
	// created is refused with the last term's token, written with the new.
	lease, err := admin.CoordinationV1().Leases(ns).Get(context.Background(), "gpureclaim-reclaimer", metav1.GetOptions{})
	require.NoError(t, err)
	lease.Spec.LeaseTransitions = ptr(int32(3))
	_, err = admin.CoordinationV1().Leases(ns).Update(context.Background(), lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	current.State = reclaim.Done
	require.Eventually(t, func() bool {
		return errors.Is(st.Write([]*reclaim.Reclaim{current}, nil), reclaim.ErrNotLeader)
	}, 20*time.Second, 100*time.Millisecond, "the apiserver refuses a status of the old term (once it has seen the Lease change)")
	err = st.Write([]*reclaim.Reclaim{current}, nil)
	require.ErrorContains(t, err, "gpureclaim.io/fence 3 is not the Lease term 4: another replica leads")
	current.Fence = 4
	require.NoError(t, st.Write([]*reclaim.Reclaim{current}, nil), "the new term writes the status")

	// The lease is asked before each request of a batch, in every writer:
	// once this replica is in doubt, nothing more is sent.
	var asked atomic.Int32
	const passed = 5
	st.Lead(context.Background(), func() error {
		if asked.Add(1) > passed {
			return errors.New("the Lease was last renewed 12s ago, past the renew deadline")
		}
		return nil
	})
	var batch []*reclaim.Reclaim
	for i := range 40 {
		r := reclaimOf(fmt.Sprintf("dd%014d-1772445600", i), fmt.Sprintf("batch-%d", i), reclaim.Pending)
		r.Fence = 4
		batch = append(batch, r)
	}
	err = st.Write(batch, nil)
	require.ErrorIs(t, err, reclaim.ErrNotLeader)
	require.ErrorContains(t, err, "past the renew deadline")
	dyn, err := kubestoreAdmin(cl)
	require.NoError(t, err)
	list, err := dyn.Resource(kubestore.GVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	sent := 0 // a create, and a status written
	for _, u := range list.Items {
		if strings.HasPrefix(u.GetName(), "dd") {
			sent++
			if state, _, _ := unstructured.NestedString(u.Object, "status", "state"); state != "" {
				sent++
			}
		}
	}
	require.Equal(t, passed, sent, "only the requests asked while leading reached the apiserver")
	_, err = st.Journal([]byte(`{"alerts":[]}`))
	require.ErrorIs(t, err, reclaim.ErrNotLeader, "nor a journal entry")
}

func ptr[T any](v T) *T { return &v }

// apiserver starts etcd and kube-apiserver with the GPUReclaim CRD and the
// reclaimer's Role in its namespace; it returns the repository's root too.
func apiserver(t testing.TB) (*kubetest.Cluster, string) {
	cl := kubetest.Start(t, false)
	root := tooltest.Root(t)
	cl.InstallCRDs(t, deploy.CRDs(root))
	role, err := deploy.ReclaimerRole(root)
	require.NoError(t, err)
	cl.BindReclaimerNamespaceRole(t, role)
	return cl, root
}

func kubestoreAdmin(cl *kubetest.Cluster) (dynamic.Interface, error) {
	return dynamic.NewForConfig(cl.RESTConfig(kubetest.AdminToken))
}

// The journal on a real apiserver, with the reclaimer's Role: a
// notification too large for one ConfigMap is cut into parts, given back
// whole and in order after a smaller one written before it, and retired;
// an entry as the reclaimer wrote it before 2 December 2026 (gzipped
// arrays of alerts) is given back as a notification of its alerts.
func TestJournal(t *testing.T) {
	cl, _ := apiserver(t)
	st, err := kubestore.New(cl.RESTConfig(kubetest.ReclaimerToken), deploy.Namespace, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	body := func(alerts []notification.Alert) []byte {
		b, err := (&notification.Notification{Alerts: alerts, Version: "4"}).Body()
		require.NoError(t, err)
		return b
	}
	small := body([]notification.Alert{reclaimtest.IdlePod("firing", t0, "ml", "nb-0")})
	// Labels that do not repeat, so that gzip cannot fold them into one part.
	var alerts []notification.Alert
	for i := range 20000 {
		alerts = append(alerts, reclaimtest.IdlePod("firing", t0, fmt.Sprintf("ns-%x", sha256.Sum256([]byte(fmt.Sprint(i)))), fmt.Sprintf("pod-%d", i)))
	}
	large := body(alerts)
	admin := cl.Client(t, kubetest.AdminToken)
	legacy := legacyJournalEntry(t, admin, alerts[:3])
	first, err := st.Journal(small)
	require.NoError(t, err)
	second, err := st.Journal(large)
	require.NoError(t, err)

	parts, err := admin.CoreV1().ConfigMaps(deploy.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kubestore.JournalLabel + "=" + second})
	require.NoError(t, err)
	require.Greater(t, len(parts.Items), 1, "cut into parts that fit")

	entries, err := st.Replay()
	require.NoError(t, err)
	require.Len(t, entries, 3)
	require.Equal(t, legacy, entries[0].ID, "oldest first")
	n, err := notification.Decode(entries[0].Notification)
	require.NoError(t, err)
	require.Len(t, n.Alerts, 3, "both parts of the old entry")
	require.Equal(t, "pod-2", n.Alerts[2].Labels.Get("pod"))
	require.Equal(t, first, entries[1].ID)
	require.Equal(t, small, entries[1].Notification)
	require.Equal(t, second, entries[2].ID)
	require.True(t, bytes.Equal(large, entries[2].Notification), "the parts in order")

	require.NoError(t, st.Retire(second))
	require.NoError(t, st.Retire(legacy))
	entries, err = st.Replay()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, first, entries[0].ID)
}

// legacyJournalEntry writes a journal entry as the reclaimer did before 2
// December 2026: the alerts in two parts, each a gzipped JSON array.
func legacyJournalEntry(t *testing.T, admin kubernetes.Interface, alerts []notification.Alert) string {
	id := "gpureclaim-journal-1"
	for i, part := range [][]notification.Alert{alerts[:1], alerts[1:]} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		require.NoError(t, json.NewEncoder(zw).Encode(part))
		require.NoError(t, zw.Close())
		_, err := admin.CoreV1().ConfigMaps(deploy.Namespace).Create(context.Background(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", id, i), Labels: map[string]string{kubestore.JournalLabel: id}},
			BinaryData: map[string][]byte{"alerts.json.gz": buf.Bytes()},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return id
}

// refused by the apiserver, and the reclaim stuck.
func TestCRDKnowsEveryState(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deploy.CRDs(tooltest.Root(t)), "gpureclaims.gpureclaim.io.yaml"))
	require.NoError(t, err)
	type props struct {
		Properties map[string]struct {
			Properties map[string]struct {
				Enum []string `json:"enum"`
			} `json:"properties"`
		} `json:"properties"`
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema props `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &crd))
	enum := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["state"].Enum
	var states []string
	for _, s := range append(slices.Clone(reclaim.States), reclaim.Resolved) {
		states = append(states, string(s))
	}
	require.ElementsMatch(t, states, enum)
}

// Helm never upgrades a chart's CRDs. Under the CRD of an earlier release
// the apiserver would drop the fields this one writes: every write is
// refused, saying how to mend it, and the replica is not ready, until the
// current CRD is applied.
func TestRefusesAStaleCRD(t *testing.T) {
	cl, root := apiserver(t)
	cl.InstallCRDs(t, "testdata/crd-18e61f6.yaml")
	st, err := kubestore.New(cl.RESTConfig(kubetest.ReclaimerToken), deploy.Namespace, "gpureclaim-reclaimer-replays")
	require.NoError(t, err)
	r := reclaimOf("fp1-1", "p1", reclaim.Pending)
	require.Eventually(t, func() bool {
		err = st.Write([]*reclaim.Reclaim{r}, nil)
		return err != nil
	}, 30*time.Second, 200*time.Millisecond, "the old schema takes effect")
	require.ErrorContains(t, err, "the GPUReclaim CRD in the cluster is older than this reclaimer")
	require.ErrorContains(t, err, "kubectl apply --server-side -f deploy/helm/gpureclaim/crds/gpureclaims.gpureclaim.io.yaml")
	require.ErrorContains(t, st.Ready(), "older than this reclaimer")

	cl.InstallCRDs(t, deploy.CRDs(root))
	require.Eventually(t, func() bool { return st.Write([]*reclaim.Reclaim{r}, nil) == nil }, 30*time.Second, 200*time.Millisecond,
		"written whole once the current CRD is applied")
	require.NoError(t, st.Ready())
	loaded, err := st.Load()
	require.NoError(t, err)
	require.Len(t, loaded, 1)
	require.Equal(t, r.Created, loaded[0].Created)
}
