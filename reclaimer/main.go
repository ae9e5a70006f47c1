// Command gpureclaim-reclaimer receives Alertmanager's notifications about
// idle GPUs, warns their owners, and after a grace period frees the GPUs:
// it evicts the pod, scales its workload down, or asks the node to end the
// processes. See README.md; gpureclaim-backtest (../backtest) replays
// recorded activity through the same policy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/prometheus/model/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpureclaim/gpureclaim/internal/cli"
	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/internal/logging"
	"github.com/gpureclaim/gpureclaim/reclaimer/alertmanager"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/email"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/kubestore"
	"github.com/gpureclaim/gpureclaim/reclaimer/lifecycle"
	"github.com/gpureclaim/gpureclaim/reclaimer/node"
	"github.com/gpureclaim/gpureclaim/reclaimer/notify"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/route"
	rslack "github.com/gpureclaim/gpureclaim/reclaimer/slack"
	"github.com/gpureclaim/gpureclaim/reclaimer/slurm"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
	rweb "github.com/gpureclaim/gpureclaim/reclaimer/web"
)

// gcPercent is the reclaimer's GOGC unless the environment sets one. Its
// heap is mostly the records it holds, long-lived; collecting when it has
// grown by 15% rather than doubled keeps 100,000 alerts in one
// notification under 300 MiB resident (462 MiB at 100), for writes that
// take half as long again (BENCHMARKS.md).
const gcPercent = 15

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	configFile, listen, webConfig, storage string
	check, printVersion                    bool
	step, retention                        time.Duration
	logLevel, logFormat                    string
	// backend is where the state lives: bbolt (storage) or kubernetes.
	backend, namespace string
	election           election
}

// election is how replicas elect the one that acts.
type election struct {
	on                                  bool
	lease, identity                     string
	leaseDuration, renewDeadline, retry time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gpureclaim-reclaimer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.configFile, "config.file", "reclaimer.yml", "The configuration file.")
	fs.BoolVar(&o.check, "config.check", false, "Load and validate the configuration (and its secret files), then exit.")
	fs.StringVar(&o.listen, "web.listen-address", ":9849", "Address to serve the webhook, API, status page and metrics on.")
	fs.StringVar(&o.webConfig, "web.config.file", "", "Path to a web configuration file (TLS, basic auth for every endpoint); see the Prometheus exporter-toolkit docs.")
	fs.StringVar(&o.backend, "storage.backend", "bbolt", "Where the state lives: bbolt (the file at --storage.path; one replica) or kubernetes (GPUReclaim resources in --kubernetes.namespace, shared by replicas that elect a leader).")
	fs.StringVar(&o.storage, "storage.path", "data/reclaimer.db", "The state database, for --storage.backend=bbolt.")
	fs.StringVar(&o.namespace, "kubernetes.namespace", "", "The reclaimer's own namespace: its GPUReclaim resources, its Lease and its replay ConfigMap live there. Default: $POD_NAMESPACE, else the service account's.")
	fs.BoolVar(&o.election.on, "leader-elect", false, "Elect one acting replica on a Lease in --kubernetes.namespace; the others are not ready and wait to take over.")
	fs.StringVar(&o.election.lease, "leader-elect.lease-name", "gpureclaim-reclaimer", "The Lease the replicas hold.")
	fs.StringVar(&o.election.identity, "leader-elect.identity", "", "This replica's name on the Lease and in the apiserver's audit log (its user agent). Default: $POD_NAME, else the host name.")
	fs.DurationVar(&o.election.leaseDuration, "leader-elect.lease-duration", 15*time.Second, "How long a leader that stopped renewing keeps the Lease: the longest a failover waits.")
	fs.DurationVar(&o.election.renewDeadline, "leader-elect.renew-deadline", 10*time.Second, "How long the leader tries to renew before it gives up and stops.")
	fs.DurationVar(&o.election.retry, "leader-elect.retry-period", 2*time.Second, "How often the replicas try to take or renew the Lease.")
	fs.DurationVar(&o.step, "step.interval", time.Second, "How often the lifecycle looks for due work.")
	fs.DurationVar(&o.retention, "storage.retention", 30*24*time.Hour, "How long finished reclaims and the audit trail are kept.")
	fs.StringVar(&o.logLevel, "log.level", "info", "Log level: debug, info, warn, error.")
	fs.StringVar(&o.logFormat, "log.format", "logfmt", "Log format: logfmt or json.")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.step < 10*time.Millisecond {
		return nil, fmt.Errorf("--step.interval: %s is too short", o.step)
	}
	switch {
	case o.backend != "bbolt" && o.backend != "kubernetes":
		return nil, fmt.Errorf("--storage.backend: %q is not bbolt or kubernetes", o.backend)
	case o.election.on && o.backend != "kubernetes":
		return nil, errors.New("--leader-elect: the replicas share their state in Kubernetes: set --storage.backend=kubernetes")
	case o.election.on && (o.election.retry >= o.election.renewDeadline || o.election.renewDeadline >= o.election.leaseDuration):
		return nil, fmt.Errorf("--leader-elect.*: want retry-period (%s) < renew-deadline (%s) < lease-duration (%s)", o.election.retry, o.election.renewDeadline, o.election.leaseDuration)
	}
	if o.election.identity == "" {
		o.election.identity = os.Getenv("POD_NAME")
	}
	if o.election.identity == "" {
		// Without a host name an election cannot tell the replicas apart.
		h, err := os.Hostname()
		if err != nil && o.election.on {
			return nil, fmt.Errorf("--leader-elect.identity: not set and no host name: %w", err)
		}
		o.election.identity = h
	}
	return o, nil
}

// restConfig is how the reclaimer reaches the apiserver: the kubeconfig
// the config names, else the pod's service account.
func restConfig(cfg *config.Config, identity string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if k := cfg.Kubernetes.Kubeconfig; k != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", k)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w (set kubernetes.kubeconfig, or kubernetes.enabled: false)", err)
	}
	// The replica's name in the apiserver's audit log, where both replicas
	// are the same service account.
	rc.UserAgent = "gpureclaim-reclaimer/" + version.Version + " (" + identity + ")"
	rc.QPS, rc.Burst = cfg.Kubernetes.QPS, cfg.Kubernetes.Burst
	return rc, nil
}

func kubeClient(cfg *config.Config, rc *rest.Config, logger *slog.Logger) (*kube.Client, error) {
	c := cfg.Kubernetes
	o := kube.Options{
		Workloads: cfg.Workloads, Kueue: c.Kueue.On(), EvictionDeadline: time.Duration(c.EvictionDeadline),
		Events: c.EventsOn(), DRADrivers: c.DRADrivers, Clock: time.Now, Logger: logger,
	}
	if h := c.JupyterHub; h != nil {
		hub, err := jupyterhub.New(*h)
		if err != nil {
			return nil, err
		}
		o.Hub = hub
	}
	return kube.New(rc, o)
}

// clients reach the services the config names.
type clients struct {
	am    *alertmanager.Client
	nodes *node.Client
	prom  *promquery.Client // nil without prometheus.url
	slurm *slurm.Client     // nil without slurm.url
}

// outboundClients builds the clients of Alertmanager, the nodes,
// Prometheus and slurmrestd.
func outboundClients(cfg *config.Config) (clients, error) {
	var c clients
	var err error
	if c.am, err = alertmanager.New(cfg.Alertmanager); err != nil {
		return c, err
	}
	if c.nodes, err = node.New(cfg.Nodes); err != nil {
		return c, err
	}
	if cfg.Prometheus.On() {
		hc, err := config.NewHTTPClient(cfg.Prometheus.HTTP, "prometheus", time.Duration(cfg.Prometheus.Timeout))
		if err != nil {
			return c, err
		}
		c.prom = &promquery.Client{URL: cfg.Prometheus.URL, HTTP: hc, Timeout: time.Duration(cfg.Prometheus.Timeout)}
		if cfg.Cluster != "" {
			c.prom.Scope = labels.MustNewMatcher(labels.MatchEqual, cfg.ClusterLabel, cfg.Cluster)
		}
	}
	if cfg.Slurm.On() {
		if c.slurm, err = slurm.New(cfg.Slurm); err != nil {
			return c, fmt.Errorf("slurm.url: %w", err)
		}
	}
	return c, nil
}

// router routes the engine's actions and questions to the clients; a
// backend the config turns off stays a nil interface.
func router(cfg *config.Config, c clients, kc *kube.Client) *route.Router {
	b := route.Backends{Config: cfg, Nodes: c.nodes}
	if kc != nil {
		b.Kubernetes = kc
	}
	if c.slurm != nil {
		b.Slurm = c.slurm
	}
	if c.prom != nil {
		b.Holders = c.prom
	}
	return route.New(b)
}

// failpoint kills the process at a named point of the lifecycle when
// GPURECLAIM_FAILPOINT names it: the crash tests use it to stop the
// reclaimer exactly there, as a power cut would. "pause:NAME" pauses it
// there instead (SIGSTOP, once), as a long GC or a frozen VM would.
func failpoint() func(string) {
	want := os.Getenv("GPURECLAIM_FAILPOINT")
	if want == "" {
		return nil
	}
	pause, paused := strings.HasPrefix(want, "pause:"), false
	want = strings.TrimPrefix(want, "pause:")
	return func(name string) {
		switch {
		case name != want:
		case pause && !paused:
			paused = true
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case !pause:
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cli.DefaultGCPercent(gcPercent)
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 2
	}
	if o.printVersion {
		fmt.Fprintln(stdout, version.Print("gpureclaim-reclaimer"))
		return 0
	}
	cfg, err := config.Load(o.configFile)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	if o.check {
		for _, w := range cfg.Warnings {
			fmt.Fprintf(stderr, "%s: warning: %s\n", o.configFile, w)
		}
		fmt.Fprintf(stdout, "%s: OK (%d policies, %d notifiers)\n", o.configFile, len(cfg.Policies), len(cfg.Notifiers))
		return 0
	}
	logger, err := logging.New(o.logLevel, o.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 2
	}
	for _, w := range cfg.Warnings {
		logger.Warn("config: "+w, "file", o.configFile)
	}
	var rc *rest.Config
	if cfg.Kubernetes.On() {
		if rc, err = restConfig(cfg, o.election.identity); err != nil {
			fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
			return 1
		}
	} else if o.backend == "kubernetes" {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer: --storage.backend=kubernetes: the config has kubernetes.enabled: false")
		return 2
	}
	st, err := openStore(o, rc)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	defer st.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpureclaim_reclaimer"), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := lifecycle.NewMetrics(reg)

	cl, err := outboundClients(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	var events reclaim.Events
	var owners reclaim.OwnerLookup
	var kc *kube.Client
	if cfg.Kubernetes.On() {
		if kc, err = kubeClient(cfg, rc, logger); err != nil {
			fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
			return 1
		}
		events, owners = kc, kc
	}
	routes := router(cfg, cl, kc)
	notifiers, err := buildNotifiers(cfg, logger, cl.am, owners, st)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Until this replica leads, it serves its health and metrics and
	// answers everything else 503: a Service sends nothing to a replica
	// that is not ready, and Alertmanager retries a 503 on the leader.
	front := newFront(reg)
	hs := httpserver.New(front, httpserver.Default)
	errc := make(chan error, 2)
	go func() {
		errc <- web.ListenAndServe(hs, &web.FlagConfig{WebListenAddresses: &[]string{o.listen}, WebConfigFile: &o.webConfig}, logger)
	}()
	r := &wiring{o: o, cfg: cfg, st: st, cl: cl, routes: routes, events: events, notifiers: notifiers, logger: logger, metrics: metrics,
		fail: failpoint(), reg: reg, webMetrics: rweb.NewMetrics(reg), front: front}
	lead := r.lead
	go func() {
		if o.election.on {
			errc <- elect(ctx, o, rc, logger, lead)
		} else {
			errc <- lead(ctx, nil)
		}
	}()
	code := 0
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("stopping", "err", err)
			code = 1
		}
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	return code
}

// reclaimStore is a store the engine and Slack's replay guard share.
type reclaimStore interface {
	reclaim.Store
	reclaim.Journal
	rslack.ReplayGuard
}

// openStore opens the backend's store; for kubernetes it settles
// o.namespace, which the Lease shares.
func openStore(o *options, rc *rest.Config) (reclaimStore, error) {
	if o.backend == "kubernetes" {
		ns, err := ownNamespace(o.namespace)
		if err != nil {
			return nil, err
		}
		o.namespace = ns
		return kubestore.New(rc, ns, o.election.lease+"-replays")
	}
	if err := os.MkdirAll(filepath.Dir(o.storage), 0o700); err != nil {
		return nil, err
	}
	return store.Open(o.storage, 10*time.Second)
}

// ownNamespace is the namespace the flag names, else the pod's.
func ownNamespace(flagged string) (string, error) {
	if flagged != "" {
		return flagged, nil
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return "", fmt.Errorf("--kubernetes.namespace: not set, no $POD_NAMESPACE and no service account: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ready is the replica's readiness: its store answers (the kubernetes
// store asks its API server; a bbolt file is ready while open), and, with
// two replicas, it surely still leads.
func ready(st reclaim.Store, leader reclaim.Leadership) func() error {
	return func() error {
		if leader != nil {
			if err := leader.Check(); err != nil {
				return err
			}
		}
		if r, ok := st.(interface{ Ready() error }); ok {
			return r.Ready()
		}
		return nil
	}
}

// notifierSet is the configured notifiers and what they serve.
type notifierSet struct {
	list  []reclaim.Notifier
	mount func(ctx context.Context, srv *rweb.Server, eng *lifecycle.Engine)
}

func buildNotifiers(cfg *config.Config, logger *slog.Logger, am *alertmanager.Client, owners reclaim.OwnerLookup, replay rslack.ReplayGuard) (notifierSet, error) {
	set := notifierSet{mount: func(context.Context, *rweb.Server, *lifecycle.Engine) {}}
	for i, n := range cfg.Notifiers {
		switch n.Type {
		case "log":
			set.list = append(set.list, notify.Log{Logger: logger})
		case "webhook":
			hc, err := config.NewHTTPClient(n.HTTP, fmt.Sprintf("notifiers[%d]", i), notify.WebhookTimeout)
			if err != nil {
				return set, err
			}
			set.list = append(set.list, &notify.Webhook{URL: n.URL, HTTP: hc})
		case "email":
			en, err := email.New(email.Options{Config: n.Email, Owners: owners, Clock: time.Now, Logger: logger, StatusPage: cfg.StatusPageURL})
			if err != nil {
				return set, err
			}
			set.list = append(set.list, en)
		case "slack":
			hc, err := config.NewHTTPClient(n.Slack.HTTP, fmt.Sprintf("notifiers[%d].slack", i), rslack.CallTimeout)
			if err != nil {
				return set, err
			}
			sn := rslack.New(rslack.Options{Config: n.Slack, Owners: owners, Clock: time.Now, Logger: logger,
				Pricing: rslack.Pricing{PerGPUHour: n.Slack.PricePerGPUHour, Currency: n.Slack.Currency}, StatusPage: cfg.StatusPageURL, HTTP: hc})
			set.list = append(set.list, sn)
			set.mount = func(_ context.Context, srv *rweb.Server, eng *lifecycle.Engine) {
				srv.Handle("/slack/interactions", rslack.NewInteractions(sn, eng, am, replay))
			}
		}
	}
	return set, nil
}
