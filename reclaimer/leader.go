package main

import (
	"context"
	"errors"
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

// lead hands every request to the acting server.
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

// elect runs lead while this replica holds the Lease, in o.namespace
// beside the state (openStore settles it). It returns when parent ends, or
// with an error when the Lease is lost or lead fails: the process then
// stops, so that a replica that may have missed the new leader's writes
// does nothing more, and comes back as a follower.
func elect(parent context.Context, o *options, rc *rest.Config, logger *slog.Logger, lead func(context.Context, reclaim.Leadership) error) error {
	ns := o.namespace
	id := o.election.identity
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	lock := newGuardedLock(&resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: o.election.lease, Namespace: ns},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}, o.election.renewDeadline)
	// lead's end comes back on led; a lead that fails stops the election
	// too, rather than holding the Lease with nothing acting.
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
		return err
	}
	logger.Info("waiting for the lease", "lease", ns+"/"+o.election.lease, "identity", id)
	le.Run(ctx)
	if parent.Err() != nil {
		return nil // stopping; lead's context ended with it
	}
	// Run gives up only once it led (it waits for the Lease until ctx
	// ends), and does not wait for lead, whose context is done: it ends soon.
	if err := <-led; err != nil {
		return err
	}
	return errors.New("lost the lease: stopping, so that nothing is done twice")
}
