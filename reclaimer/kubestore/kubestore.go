// Package kubestore keeps the reclaimer's state in the Kubernetes API: one
// GPUReclaim resource per reclaim in the reclaimer's namespace (spec: the
// target, the policy and the alert episode, written once; status: the
// state, the times, what was done, and the reclaim's audit events, written
// through the status subresource), so that any replica that wins the
// leader election takes over where the last one stopped, and `kubectl get
// gpureclaims` lists them. Only the leader writes: every write carries the
// resourceVersion it last saw and the leader's fencing token, so a replica
// that lost the lease and still writes is refused. Beside
// the GPUReclaims (this file) it keeps, in ConfigMaps, the journal of
// notifications answered before their reclaims were written (journal.go)
// and the Slack requests already seen (replays.go).
package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpureclaim/gpureclaim/api/v1alpha1"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// What the reclaimer sets on a GPUReclaim beside its spec and status.
const (
	// FenceAnnotation carries the creator's fencing token (its term of
	// the Lease), as status.fence carries the status writer's; the
	// chart's ValidatingAdmissionPolicy refuses a write whose token is
	// not the Lease's current term.
	FenceAnnotation = "gpureclaim.io/fence"
	// MaxEvents bounds the audit events a resource keeps; the oldest go first.
	MaxEvents = 100
)

// GVR is the GPUReclaim resource's group, version and resource.
var GVR = v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource)

// Store is a reclaim.Store in GPUReclaim resources of one namespace, and
// the Slack replay guard in a ConfigMap there.
type Store struct {
	ns  string
	res dynamic.ResourceInterface
	// rest writes GPUReclaims from their JSON: the dynamic client would
	// turn each into a map and back, and decode the whole answer, where
	// a write needs only its resourceVersion.
	rest rest.Interface
	cm   kubernetes.Interface
	// ReplayMap names the ConfigMap of seen Slack signatures.
	replayMap string
	timeout   time.Duration
	base      atomic.Pointer[context.Context] // set by Lead
	leading   atomic.Pointer[func() error]    // set by Lead

	// schemaOK: a write kept the current CRD's fields; stale: one did not.
	schemaOK, stale atomic.Bool

	mu sync.Mutex
	// objs mirrors what this replica wrote or loaded: only the leader
	// writes, so reads need no round trip.
	objs map[string]*object
}

type object struct {
	rv     string
	r      *reclaim.Reclaim // nil until its status is written
	events []reclaim.Event
	// created is when a resource without a status was created: one whose
	// reclaim is never written again is pruned as an ended one would be.
	created time.Time
}

var (
	_ reclaim.Store   = (*Store)(nil)
	_ reclaim.Journal = (*Store)(nil)
)

// New returns a store in namespace ns; replayMap names the ConfigMap that
// holds Slack's seen signatures.
func New(rc *rest.Config, ns, replayMap string) (*Store, error) {
	// One client, and so one rate limit, for the dynamic reads and the
	// writes.
	cfg := dynamic.ConfigFor(rc)
	cfg.GroupVersion, cfg.APIPath = &v1alpha1.SchemeGroupVersion, "/apis"
	rcl, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &Store{ns: ns, res: dynamic.New(rcl).Resource(GVR).Namespace(ns), rest: rcl, cm: cs, replayMap: replayMap, timeout: 30 * time.Second, objs: map[string]*object{}}, nil
}

// readyTimeout bounds the readiness probe's look at the API server.
const readyTimeout = 3 * time.Second

// Ready says whether the API server answers for the store: while it does
// not, the replica is not ready (a notification could not be recorded).
func (s *Store) Ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := s.res.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return fmt.Errorf("the store's API server does not answer: %w", err)
	}
	if s.stale.Load() {
		return errStaleCRD
	}
	return nil
}

// Lead makes every request of the store end when ctx does: the leader's
// term, so that losing the Lease cancels the writes in flight. check is
// asked before each write request, in every writer: a batch started while
// this replica led sends nothing once it is in doubt.
func (s *Store) Lead(ctx context.Context, check func() error) {
	s.base.Store(&ctx)
	s.leading.Store(&check)
}

// fence refuses a write once this replica may have lost the Lease.
func (s *Store) fence() error {
	if p := s.leading.Load(); p != nil && *p != nil {
		if err := (*p)(); err != nil {
			return fmt.Errorf("%w: %v", reclaim.ErrNotLeader, err)
		}
	}
	return nil
}

func (s *Store) ctx() (context.Context, context.CancelFunc) {
	base := context.Background()
	if p := s.base.Load(); p != nil {
		base = *p
	}
	return context.WithTimeout(base, s.timeout)
}

// Load lists every GPUReclaim of the namespace and keeps them as the
// mirror: the new leader starts from what the last one wrote.
func (s *Store) Load() ([]*reclaim.Reclaim, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	objs := map[string]*object{}
	var out []*reclaim.Reclaim
	cont := ""
	for {
		list, err := s.res.List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return nil, fmt.Errorf("listing %s in %s: %w", v1alpha1.Resource, s.ns, err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			o, err := decode(u)
			if err != nil {
				return nil, err
			}
			objs[u.GetName()] = o
			if o.r != nil {
				out = append(out, o.r)
			}
		}
		if cont = list.GetContinue(); cont == "" {
			break
		}
	}
	s.mu.Lock()
	s.objs = objs
	s.mu.Unlock()
	return out, nil
}

// writers bounds the writes one Write has in flight at once: the
// client's rate limit (kubernetes.qps, burst) paces them.
const writers = 16

// Write creates or updates each reclaim's resource with its new events,
// several at once. It returns once the apiserver has stored every one (the
// engine carries a decision out only after), or what failed: a write
// another replica got in first to comes back as a reclaim.ConflictError
// holding what the store now has; one the apiserver's fence refuses, as
// reclaim.ErrNotLeader.
func (s *Store) Write(rs []*reclaim.Reclaim, events []reclaim.Event) error {
	byReclaim := map[string][]reclaim.Event{}
	for _, e := range events {
		byReclaim[e.Reclaim] = append(byReclaim[e.Reclaim], e)
	}
	type write struct {
		r      *reclaim.Reclaim
		events []reclaim.Event
	}
	var ws []write
	for _, r := range rs {
		ws = append(ws, write{r, byReclaim[r.ID]})
		delete(byReclaim, r.ID)
	}
	// Events of reclaims not written this time join their resource.
	s.mu.Lock()
	for id, evs := range byReclaim {
		o := s.objs[id]
		if o == nil || o.r == nil {
			s.mu.Unlock()
			return fmt.Errorf("audit events for reclaim %s, which the store does not hold", id)
		}
		ws = append(ws, write{o.r, evs})
	}
	s.mu.Unlock()

	return parallel(len(ws), func(i int) error { return s.put(ws[i].r, ws[i].events) })
}

// put writes one reclaim: a new one is created with its spec, then its
// status is written through the status subresource, which is all a later
// write changes (the spec never does). The mirror is read and updated
// under s.mu, the requests made outside it.
func (s *Store) put(r *reclaim.Reclaim, events []reclaim.Event) error {
	cp := *r
	s.mu.Lock()
	o := s.objs[r.ID]
	s.mu.Unlock()
	var all []reclaim.Event
	if o != nil {
		all = append(all, o.events...)
	}
	all = append(all, events...)
	if len(all) > MaxEvents {
		all = all[len(all)-MaxEvents:]
	}
	g := s.render(&cp, all)
	ctx, cancel := s.ctx()
	defer cancel()
	rv := ""
	if o != nil {
		rv = o.rv
	} else {
		var err error
		if rv, err = s.create(ctx, g); err != nil {
			return err
		}
	}
	g.ResourceVersion = rv
	body, err := json.Marshal(g)
	if err != nil {
		return err
	}
	req := s.rest.Put().Name(r.ID).SubResource("status")
	// The first write reads the whole object back (checkSchema), the
	// rest its metadata only.
	if s.schemaOK.Load() {
		req.SetHeader("Accept", metadataOnly)
	}
	raw, err := s.send(ctx, req, body, r.ID)
	if apierrors.IsNotFound(err) {
		return s.noStatus(ctx, r.ID, err)
	}
	if err != nil {
		return err
	}
	var stored struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status struct {
			Created *metav1.MicroTime `json:"created"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &stored); err != nil {
		return fmt.Errorf("writing %s %s: reading the apiserver's answer: %w", v1alpha1.Kind, r.ID, err)
	}
	if stored.Metadata.ResourceVersion == "" {
		return fmt.Errorf("writing %s %s: the apiserver's answer has no resourceVersion", v1alpha1.Kind, r.ID)
	}
	s.mu.Lock()
	s.objs[r.ID] = &object{rv: stored.Metadata.ResourceVersion, r: &cp, events: all}
	s.mu.Unlock()
	return s.checkSchema(stored.Status.Created != nil, r) // written, but maybe not whole: then written again
}

// create creates a reclaim's resource with its spec (the apiserver drops
// a create's status) and returns its resourceVersion. Until its status is
// written it holds no decision: Load passes it over, and the next write
// of the reclaim writes the status onto it.
func (s *Store) create(ctx context.Context, g *v1alpha1.GPUReclaim) (string, error) {
	spec := *g
	spec.Status = v1alpha1.GPUReclaimStatus{}
	body, err := json.Marshal(&spec)
	if err != nil {
		return "", err
	}
	req := s.rest.Post().SetHeader("Accept", metadataOnly)
	raw, err := s.send(ctx, req, body, g.Name)
	if err != nil {
		return "", err
	}
	var created metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &created); err != nil {
		return "", fmt.Errorf("creating %s %s: reading the apiserver's answer: %w", v1alpha1.Kind, g.Name, err)
	}
	if created.ResourceVersion == "" {
		return "", fmt.Errorf("creating %s %s: the apiserver's answer has no resourceVersion", v1alpha1.Kind, g.Name)
	}
	s.mu.Lock()
	s.objs[g.Name] = &object{rv: created.ResourceVersion, created: created.CreationTimestamp.Time}
	s.mu.Unlock()
	return created.ResourceVersion, nil
}

// noStatus says why a status write found nothing: the resource is gone
// (it is created again by the next write), or the CRD has no status
// subresource, as before this release.
func (s *Store) noStatus(ctx context.Context, id string, cause error) error {
	if _, err := s.res.Get(ctx, id, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		s.mu.Lock()
		delete(s.objs, id)
		s.mu.Unlock()
		return fmt.Errorf("%s %s was deleted before its status was written: %w", v1alpha1.Kind, id, cause)
	}
	s.stale.Store(true)
	return fmt.Errorf("writing the status of %s %s: %w", v1alpha1.Kind, id, errStaleCRD)
}

// send makes one write request, once this replica is known to lead, and
// returns the apiserver's answer, or why it was refused.
func (s *Store) send(ctx context.Context, req *rest.Request, body []byte, id string) ([]byte, error) {
	if err := s.fence(); err != nil {
		return nil, err
	}
	res := req.Namespace(s.ns).Resource(v1alpha1.Resource).Body(body).Do(ctx)
	raw, _ := res.Raw()
	err := res.Error() // the apiserver's Status, where Raw gives only the code
	switch {
	case err == nil:
		return raw, nil
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return nil, s.conflict(ctx, id, err)
	case strings.Contains(err.Error(), FenceAnnotation):
		return nil, fmt.Errorf("%w: the apiserver refused %s %s: %v", reclaim.ErrNotLeader, v1alpha1.Kind, id, err)
	default:
		return nil, fmt.Errorf("writing %s %s: %w", v1alpha1.Kind, id, err)
	}
}

// metadataOnly asks the apiserver to answer a write with the object's
// metadata alone.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// errStaleCRD says the cluster's GPUReclaim CRD is older than the
// reclaimer: the apiserver prunes the fields it writes (Helm installs a
// chart's CRDs but never upgrades them).
var errStaleCRD = errors.New("the GPUReclaim CRD in the cluster is older than this reclaimer, and the apiserver drops the fields it writes: " +
	"apply this release's CRD (kubectl apply --server-side -f deploy/helm/gpureclaim/crds/gpureclaims.gpureclaim.io.yaml)")

// checkSchema looks, on the first write, whether the apiserver kept a
// field only the current CRD declares; until one is kept, every write is
// refused and the replica is not ready, so that nothing is carried out on
// a record the next leader could not read back whole.
func (s *Store) checkSchema(keptCreated bool, r *reclaim.Reclaim) error {
	if s.schemaOK.Load() || r.Created.IsZero() {
		return nil
	}
	if !keptCreated {
		s.stale.Store(true)
		return fmt.Errorf("writing %s %s: %w", v1alpha1.Kind, r.ID, errStaleCRD)
	}
	s.stale.Store(false)
	s.schemaOK.Store(true)
	return nil
}

// conflict re-reads a reclaim another replica wrote since this one read
// it, so that the engine goes on from what the store holds.
func (s *Store) conflict(ctx context.Context, id string, cause error) error {
	u, err := s.res.Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s %s was written by another replica, and re-reading it failed: %v (%w)", v1alpha1.Kind, id, err, cause)
	}
	o, err := decode(u)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.objs[id] = o
	s.mu.Unlock()
	if o.r == nil {
		// Created, its status not yet written: no decision to go on from;
		// the write is tried again onto it.
		return fmt.Errorf("%s %s has no status yet: %w", v1alpha1.Kind, id, cause)
	}
	return &reclaim.ConflictError{Stored: o.r, Cause: cause}
}

// decode reads a GPUReclaim back as the mirror keeps it: its reclaim and
// audit events, none for one whose status was never written (its creator
// stopped between the create and the status).
func decode(u *unstructured.Unstructured) (*object, error) {
	var g v1alpha1.GPUReclaim
	if err := fromUnstructured(u.Object, &g); err != nil {
		return nil, fmt.Errorf("%s %s: %w", v1alpha1.Kind, u.GetName(), err)
	}
	o := &object{rv: g.ResourceVersion, created: g.CreationTimestamp.Time}
	if g.Status.State == "" {
		return o, nil
	}
	var err error
	o.r, o.events, err = reclaim.FromAPI(&g)
	return o, err
}

func (s *Store) render(r *reclaim.Reclaim, events []reclaim.Event) *v1alpha1.GPUReclaim {
	g := reclaim.ToAPI(r, events)
	g.Namespace = s.ns
	if r.Fence > 0 {
		g.Annotations = map[string]string{FenceAnnotation: strconv.FormatInt(r.Fence, 10)}
	}
	return g
}

func fromUnstructured(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Audit returns the newest events first, from every resource.
func (s *Store) Audit(limit int) ([]reclaim.Event, error) {
	type at struct {
		e   reclaim.Event
		pos int // in its reclaim's events, which are in the order written
	}
	s.mu.Lock()
	var all []at
	for _, o := range s.objs {
		for i, e := range o.events {
			all = append(all, at{e, i})
		}
	}
	s.mu.Unlock()
	// Newest first; within one instant, the later written first.
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		switch {
		case !a.e.Time.Equal(b.e.Time):
			return a.e.Time.After(b.e.Time)
		case a.e.Reclaim != b.e.Reclaim:
			return a.e.Reclaim > b.e.Reclaim
		}
		return a.pos > b.pos
	})
	out := make([]reclaim.Event, 0, min(limit, len(all)))
	for _, a := range all[:min(limit, len(all))] {
		out = append(out, a.e)
	}
	return out, nil
}

// Prune deletes the resources of reclaims that ended and were told before
// before, as the bbolt store does, and events older than before; several
// requests at once, none under the mirror's lock.
func (s *Store) Prune(before time.Time) (int, error) {
	type gone struct{ id, rv string }
	var deletes []gone
	var trims []*reclaim.Reclaim
	s.mu.Lock()
	for id, o := range s.objs {
		r := o.r
		if r == nil {
			if o.created.Before(before) {
				deletes = append(deletes, gone{id, o.rv})
			}
			continue
		}
		if r.EndedBefore(before) {
			deletes = append(deletes, gone{id, o.rv})
			continue
		}
		keep := o.events[:0:0]
		for _, e := range o.events {
			if !e.Time.Before(before) {
				keep = append(keep, e)
			}
		}
		if len(keep) != len(o.events) {
			o.events = keep
			trims = append(trims, r)
		}
	}
	s.mu.Unlock()
	var deleted atomic.Int64
	err := parallel(len(deletes), func(i int) error {
		d := deletes[i]
		if err := s.fence(); err != nil {
			return err
		}
		ctx, cancel := s.ctx()
		defer cancel()
		err := s.res.Delete(ctx, d.id, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &d.rv}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", v1alpha1.Kind, d.id, err)
		}
		s.mu.Lock()
		delete(s.objs, d.id)
		s.mu.Unlock()
		deleted.Add(1)
		return nil
	})
	if err != nil {
		return int(deleted.Load()), err
	}
	return int(deleted.Load()), parallel(len(trims), func(i int) error { return s.put(trims[i], nil) })
}

// parallel runs f for 0..n-1, writers at a time, and returns the first error.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(writers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = f(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func (s *Store) Close() error { return nil }
