package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	rweb "github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// front is what a replica serves: while it does not lead, its health and
// metrics, and 503 for the rest (its /readyz too, so that the Service
// sends it nothing); once it leads, the whole server.
type front struct {
	srv     atomic.Pointer[rweb.Server]
	metrics http.Handler
}

func newFront(reg *prometheus.Registry) *front {
	f := &front{metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gpureclaim_reclaimer_leader",
		Help: "1 when this replica acts (it holds the Lease, or runs alone), 0 while it waits to take over.",
	}, func() float64 {
		if f.srv.Load() != nil {
			return 1
		}
		return 0
	}))
	return f
}

// lead hands every request to the acting server; nil, to none.
func (f *front) lead(srv *rweb.Server) { f.srv.Store(srv) }

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s := f.srv.Load(); s != nil {
		s.ServeHTTP(w, r)
		return
	}
	switch r.URL.Path {
	case "/healthz":
		_, _ = w.Write([]byte("ok\n"))
	case "/metrics":
		f.metrics.ServeHTTP(w, r)
	default:
		// Alertmanager retries a 5xx: it reaches the leader then.
		w.Header().Set("Retry-After", "5")
		http.Error(w, "not the leader: another replica acts; this one takes over if it stops", http.StatusServiceUnavailable)
	}
}

// elect runs lead for each term this replica holds the Lease, in
// o.namespace beside the state (openStore settles it). A term ends when the
// Lease is lost or in doubt (a pause past the renew deadline): lead's
// context ends, the replica serves 503 again and waits for a next term,
// which it starts afresh from the store, under a new fencing token. It
// returns when parent ends, or with lead's error.
func elect(parent context.Context, o *options, rc *rest.Config, logger *slog.Logger, lead func(context.Context, reclaim.Leadership) error) error {
	ns := o.namespace
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	lock := newGuardedLock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: o.election.lease, Namespace: ns},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.election.identity},
	}, o.election.renewDeadline)
	for {
		led, err := term(parent, o, cs, lock, logger, lead)
		if parent.Err() != nil {
			return nil // stopping; lead's context ended with it
		}
		if err != nil {
			return err
		}
		if led {
			lock.stepDown()
			logger.Warn("stepped down: waiting for the next term", "lease", ns+"/"+o.election.lease, "identity", o.election.identity)
		}
	}
}

// term waits for the Lease and runs lead while it is held. It says
// whether this replica led, and returns lead's error.
func term(parent context.Context, o *options, cs kubernetes.Interface, lock *guardedLock, logger *slog.Logger, lead func(context.Context, reclaim.Leadership) error) (bool, error) {
	ns, id := o.namespace, o.election.identity
	// lead's end comes back on led; a lead that fails ends the term too,
	// rather than holding the Lease with nothing acting.
	ctx, stop := context.WithCancel(parent)
	defer stop()
	led := make(chan error, 1)
	var leading atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		Name:          o.election.lease,
		LeaseDuration: o.election.leaseDuration,
		RenewDeadline: o.election.renewDeadline,
		RetryPeriod:   o.election.retry,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Store(true)
				if l, err := cs.CoordinationV1().Leases(ns).Get(ctx, o.election.lease, metav1.GetOptions{}); err == nil {
					key := ns + "/" + o.election.lease + "/" + string(l.UID)
					lock.lease.Store(&key)
				} else {
					logger.Warn("reading the Lease's uid: kills go to the nodes without a fencing token", "err", err)
				}
				logger.Info("took the lease: acting", "lease", ns+"/"+o.election.lease, "identity", id, "fencing_token", lock.Token())
				// In doubt, stop at once: every write, action and message
				// checks too, but the work in flight ends here.
				ctx, doubt := context.WithCancel(ctx)
				defer doubt()
				go func() {
					t := time.NewTicker(o.election.retry / 2)
					defer t.Stop()
					for {
						select {
						case <-ctx.Done():
							return
						case <-t.C:
							if err := lock.Check(); err != nil {
								logger.Warn("leadership in doubt: stopping every action", "err", err)
								doubt()
								stop()
								return
							}
						}
					}
				}()
				err := lead(ctx, lock)
				if err != nil {
					stop()
				}
				led <- err
			},
			OnStoppedLeading: func() {
				if leading.Load() {
					logger.Warn("lost the lease", "lease", ns+"/"+o.election.lease, "identity", id)
				}
			},
			OnNewLeader: func(who string) {
				if who != id {
					logger.Info("another replica acts", "leader", who)
				}
			},
		},
	})
	if err != nil {
		return false, err
	}
	logger.Info("waiting for the lease", "lease", ns+"/"+o.election.lease, "identity", id)
	le.Run(ctx)
	if !leading.Load() {
		return false, nil // parent ended before this replica led
	}
	// Run does not wait for lead, whose context is done: it ends soon, and
	// nothing of this term runs on into the next.
	return true, <-led
}
