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
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/internal/logging"
	"github.com/gpureclaim/gpureclaim/reclaimer/alertmanager"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/jupyterhub"
	"github.com/gpureclaim/gpureclaim/reclaimer/kube"
	"github.com/gpureclaim/gpureclaim/reclaimer/node"
	"github.com/gpureclaim/gpureclaim/reclaimer/notify"
	"github.com/gpureclaim/gpureclaim/reclaimer/promquery"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	rslack "github.com/gpureclaim/gpureclaim/reclaimer/slack"
	"github.com/gpureclaim/gpureclaim/reclaimer/slurm"
	"github.com/gpureclaim/gpureclaim/reclaimer/store"
	rweb "github.com/gpureclaim/gpureclaim/reclaimer/web"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	configFile, listen, webConfig, storage string
	check, printVersion                    bool
	step, retention                        time.Duration
	logLevel, logFormat                    string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gpureclaim-reclaimer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.configFile, "config.file", "reclaimer.yml", "The configuration file.")
	fs.BoolVar(&o.check, "config.check", false, "Load and validate the configuration (and its secret files), then exit.")
	fs.StringVar(&o.listen, "web.listen-address", ":9849", "Address to serve the webhook, API, status page and metrics on.")
	fs.StringVar(&o.webConfig, "web.config.file", "", "Path to a web configuration file (TLS, basic auth for every endpoint); see the Prometheus exporter-toolkit docs.")
	fs.StringVar(&o.storage, "storage.path", "data/reclaimer.db", "The state database (bbolt).")
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
	return o, nil
}

func kubeClient(cfg *config.Config, logger *slog.Logger) (*kube.Client, error) {
	c := cfg.Kubernetes
	var rc *rest.Config
	var err error
	if c.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w (set kubernetes.kubeconfig, or kubernetes.enabled: false)", err)
	}
	rc.UserAgent = "gpureclaim-reclaimer/" + version.Version
	o := kube.Options{
		Workloads: cfg.Workloads, Kueue: c.Kueue.On(), EvictionDeadline: time.Duration(c.EvictionDeadline),
		Events: c.EventsOn(), Clock: time.Now, Logger: logger,
	}
	if h := c.JupyterHub; h != nil {
		o.Hub = jupyterhub.New(h.URL, h.Token, time.Duration(h.Timeout))
	}
	return kube.New(rc, o)
}

// failpoint kills the process at a named point of the lifecycle when
// GPURECLAIM_FAILPOINT names it: the crash tests use it to stop the
// reclaimer exactly there, as a power cut would.
func failpoint() func(string) {
	want := os.Getenv("GPURECLAIM_FAILPOINT")
	if want == "" {
		return nil
	}
	return func(name string) {
		if name == want {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
		fmt.Fprintf(stdout, "%s: OK (%d policies, %d notifiers)\n", o.configFile, len(cfg.Policies), len(cfg.Notifiers))
		return 0
	}
	logger, err := logging.New(o.logLevel, o.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 2
	}
	if err := os.MkdirAll(filepath.Dir(o.storage), 0o700); err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	st, err := store.Open(o.storage, 10*time.Second)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	defer st.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(versioncollector.NewCollector("gpureclaim_reclaimer"), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := reclaim.NewMetrics(reg)

	am, err := alertmanager.New(cfg.Alertmanager)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	nodes := node.New(cfg.Nodes)
	act := &actor{cfg: cfg, nodes: nodes}
	insp := &inspector{nodes: nodes}
	if cfg.Slurm.On() {
		sc, err := slurm.New(cfg.Slurm)
		if err != nil {
			fmt.Fprintln(stderr, "gpureclaim-reclaimer: slurm.url:", err)
			return 1
		}
		act.slurm, insp.slurm = sc, sc
	}
	var events reclaim.Events
	if cfg.Kubernetes.On() {
		kc, err := kubeClient(cfg, logger)
		if err != nil {
			fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
			return 1
		}
		act.kube, insp.kube = kc, kc
		events = kc
	}
	var owners rslack.OwnerLookup
	if act.kube != nil {
		owners = act.kube
	}
	notifiers, err := buildNotifiers(cfg, logger, am, owners, st)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	eng, err := reclaim.New(reclaim.Options{
		Config: cfg, Store: st, Checker: am, Inspector: insp, Actor: act, Events: events,
		Notifiers: notifiers.list, Clock: time.Now, Logger: logger, Metrics: metrics, Failpoint: failpoint(),
	})
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-reclaimer:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv := rweb.New(rweb.Options{Config: cfg, Engine: eng, Logger: logger, Clock: time.Now, Registry: reg, Ready: func() error { return nil }})
	notifiers.mount(ctx, srv, eng)
	go eng.Run(ctx, o.step)
	go every(ctx, time.Hour, func() {
		if n, err := eng.Prune(time.Now().Add(-o.retention)); err != nil {
			logger.Error("pruning the store", "err", err)
		} else if n > 0 {
			logger.Info("pruned finished reclaims", "count", n)
		}
	})
	if cfg.Prometheus.On() {
		prom := &promquery.Client{URL: cfg.Prometheus.URL, Token: cfg.Prometheus.BearerToken, Timeout: time.Duration(cfg.Prometheus.Timeout)}
		go every(ctx, time.Duration(cfg.Prometheus.Interval), func() { eng.RestoreOnDemand(ctx, prom) })
	}

	hs := httpserver.New(srv, httpserver.Default)
	errc := make(chan error, 1)
	go func() {
		errc <- web.ListenAndServe(hs, &web.FlagConfig{WebListenAddresses: &[]string{o.listen}, WebConfigFile: &o.webConfig}, logger)
	}()
	logger.Info("reclaimer started", "listen", o.listen, "policies", len(cfg.Policies), "dry_run", cfg.DryRun)
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serving HTTP", "err", err)
			return 1
		}
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdown)
	return 0
}

// every runs f now and then every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// notifierSet is the configured notifiers and what they serve.
type notifierSet struct {
	list  []reclaim.Notifier
	mount func(ctx context.Context, srv *rweb.Server, eng *reclaim.Engine)
}

func buildNotifiers(cfg *config.Config, logger *slog.Logger, am *alertmanager.Client, owners rslack.OwnerLookup, replay rslack.ReplayGuard) (notifierSet, error) {
	set := notifierSet{mount: func(context.Context, *rweb.Server, *reclaim.Engine) {}}
	for _, n := range cfg.Notifiers {
		switch n.Type {
		case "log":
			set.list = append(set.list, notify.Log{Logger: logger})
		case "webhook":
			set.list = append(set.list, &notify.Webhook{URL: n.URL, Token: n.BearerToken, HTTP: &http.Client{Timeout: 10 * time.Second}})
		case "slack":
			sn := rslack.New(rslack.Options{Config: n.Slack, Owners: owners, Clock: time.Now, Logger: logger,
				Pricing: rslack.Pricing{PerGPUHour: n.Slack.PricePerGPUHour, Currency: n.Slack.Currency}, StatusPage: cfg.StatusPageURL})
			set.list = append(set.list, sn)
			set.mount = func(_ context.Context, srv *rweb.Server, eng *reclaim.Engine) {
				srv.Handle("/slack/interactions", rslack.NewInteractions(sn, eng, am, replay))
			}
		}
	}
	return set, nil
}
