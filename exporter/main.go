// Command gpureclaim-exporter exports GPU, MIG, MPS and owner metrics from
// NVML for Prometheus: on a real node through the NVIDIA driver, or on a
// simulated node (--simulate) where there is none.
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
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpureclaim/gpureclaim/exporter/action"
	"github.com/gpureclaim/gpureclaim/exporter/collector"
	"github.com/gpureclaim/gpureclaim/exporter/sampler"
	"github.com/gpureclaim/gpureclaim/internal/logging"
	"github.com/gpureclaim/gpureclaim/internal/nvmlsim"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	listen, metricsPath, webConfig string
	interval                       time.Duration
	simulate, simulateDir          string
	simulateKubeconfig             string
	simulateSpeed                  float64
	node                           string
	procfs, passwd                 string
	podResourcesSocket             string
	logLevel, logFormat            string
	printVersion                   bool

	actionTokenFile, actionListen string
	actionGrace, actionWindow     time.Duration
	actionThreshold               float64
	actionExemptUsers             string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gpureclaim-exporter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "web.listen-address", ":9847", "Address to serve metrics on.")
	fs.StringVar(&o.metricsPath, "web.telemetry-path", "/metrics", "Path to serve metrics under.")
	fs.StringVar(&o.webConfig, "web.config.file", "", "Path to a web configuration file (TLS, basic auth); see the Prometheus exporter-toolkit docs.")
	fs.DurationVar(&o.interval, "sample.interval", 5*time.Second, "How often to read NVML. Scrapes are served from the last sample.")
	fs.StringVar(&o.simulate, "simulate", "", "Run on simulated GPUs: a built-in scenario name ("+fmt.Sprint(nvmlsim.Builtin())+") or a scenario file.")
	fs.Float64Var(&o.simulateSpeed, "simulate.speed", 0, "Run the scenario this many times faster than the wall clock (default: the scenario's speed).")
	fs.StringVar(&o.simulateKubeconfig, "simulate.kubeconfig", "", "Follow the simulated node's pods in this cluster: a pod deleted there (evicted, scaled down) leaves its simulated GPU.")
	fs.StringVar(&o.simulateDir, "simulate.dir", "", "Where the simulated node writes its /proc tree and kubelet socket (default: a temporary folder).")
	fs.StringVar(&o.node, "node-name", os.Getenv("NODE_NAME"), "Node name to report (default: $NODE_NAME, else the host name; the scenario's node when simulating).")
	fs.StringVar(&o.procfs, "path.procfs", "/proc", "The /proc to read process owners from (the host's, from a container); empty turns process attribution off.")
	fs.StringVar(&o.passwd, "path.passwd", "/etc/passwd", "The passwd file to name users by (the host's, from a container); empty keeps uids.")
	fs.StringVar(&o.podResourcesSocket, "kubelet.pod-resources-socket", podresources.DefaultSocket, "The kubelet's pod-resources socket; empty turns pod attribution off.")
	fs.StringVar(&o.logLevel, "log.level", "info", "Log level: debug, info, warn, error.")
	fs.StringVar(&o.logFormat, "log.format", "logfmt", "Log format: logfmt or json.")
	fs.BoolVar(&o.printVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&o.actionTokenFile, "action.token-file", "", "Turns the node action endpoint on: the file holds the bearer token the reclaimer must send. Off when empty.")
	fs.StringVar(&o.actionListen, "action.listen-address", "", "Serve the action endpoint on its own address (default: under /api/v1/ of --web.listen-address).")
	fs.DurationVar(&o.actionGrace, "action.kill-grace", 30*time.Second, "Time between SIGTERM and SIGKILL, for the workload to checkpoint.")
	fs.DurationVar(&o.actionWindow, "action.idle-window", 5*time.Minute, "The node signals a unit's processes only if every sample of this window was idle.")
	fs.Float64Var(&o.actionThreshold, "action.idle-threshold", 0.05, "Activity under which a sample is idle (SM activity, else utilization).")
	fs.StringVar(&o.actionExemptUsers, "action.exempt-users", "", "Comma-separated Unix users whose processes are never signalled.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.interval < time.Second {
		return nil, fmt.Errorf("--sample.interval: %s is under 1s; NVML's averages and GPM need longer", o.interval)
	}
	if o.actionListen != "" && o.actionTokenFile == "" {
		return nil, errors.New("--action.listen-address: needs --action.token-file; the endpoint never runs unauthenticated")
	}
	if o.actionTokenFile != "" && o.procfs == "" {
		return nil, errors.New("--action.token-file: the action endpoint checks processes in /proc before it signals them; --path.procfs must not be empty")
	}
	if o.actionGrace < 0 || o.actionWindow <= 0 {
		return nil, errors.New("--action.kill-grace must not be negative and --action.idle-window must be positive")
	}
	if o.actionThreshold <= 0 || o.actionThreshold >= 1 {
		return nil, fmt.Errorf("--action.idle-threshold: %g must be between 0 and 1", o.actionThreshold)
	}
	if o.simulateSpeed < 0 {
		return nil, errors.New("--simulate.speed: must not be negative")
	}
	return o, nil
}

// node is what the exporter samples: a real or a simulated node.
type node struct {
	nvml   nvml.Interface
	sim    *nvmlsim.Sim
	name   string
	proc   *procfs.FS
	allocs sampler.AllocationLister
	pods   podmeta.Resolver
	close  func()
}

const noDriverHelp = `NVML could not start (%s): this machine has no NVIDIA driver, or the exporter cannot load libnvidia-ml.so.1.
To run on simulated GPUs instead:  gpureclaim-exporter --simulate=demo`

func realNode(o *options, logger *slog.Logger) (*node, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf(noDriverHelp, ret.Error())
	}
	n := &node{nvml: lib, name: o.node, close: func() { lib.Shutdown() }}
	if o.procfs != "" {
		n.proc = procfs.New(o.procfs, o.passwd)
	}
	if n.name == "" {
		n.name, _ = os.Hostname()
	}
	if o.podResourcesSocket != "" {
		if _, err := os.Stat(o.podResourcesSocket); err != nil {
			logger.Info("no kubelet pod-resources socket: owners come from processes only", "socket", o.podResourcesSocket)
		} else {
			c, err := podresources.Dial(o.podResourcesSocket, 5*time.Second)
			if err != nil {
				return nil, err
			}
			n.allocs = c
			prev := n.close
			n.close = func() { c.Close(); prev() }
		}
	}
	return n, nil
}

func simulatedNode(o *options, logger *slog.Logger) (*node, error) {
	sc, err := nvmlsim.Open(o.simulate)
	if err != nil {
		return nil, err
	}
	if o.simulateSpeed > 0 {
		sc.Speed = o.simulateSpeed
	}
	sn, err := nvmlsim.StartNode(sc, o.simulateDir, time.Now)
	if err != nil {
		return nil, err
	}
	client, err := podresources.Dial(sn.Socket, 5*time.Second)
	if err != nil {
		sn.Close()
		return nil, err
	}
	name := sc.Node
	if o.node != "" {
		name = o.node
	}
	logger.Info("running on simulated GPUs", "scenario", o.simulate, "system", sc.System, "speed", sc.Speed, "proc", sn.ProcRoot)
	return &node{
		nvml: sn, sim: sn.Sim, name: name,
		proc:   procfs.New(sn.ProcRoot, sn.Passwd),
		allocs: client,
		pods:   podmeta.NewStatic(sn.PodMeta()),
		close:  func() { client.Close(); sn.Close() },
	}, nil
}

// gatherer serves the snapshot's metrics from a cache refreshed once per
// sample, and the health, version and runtime metrics live; the live
// registry takes any other metric (the action endpoint's).
func gatherer(src collector.Source, clock func() time.Time) (prometheus.Gatherer, *prometheus.Registry, error) {
	cached, err := collector.NewSnapshotGatherer(src, collector.FromSnapshot(src)...)
	if err != nil {
		return nil, nil, err
	}
	live := prometheus.NewRegistry()
	if err := registerAll(live, liveCollectors(src, clock)...); err != nil {
		return nil, nil, err
	}
	return prometheus.Gatherers{cached, live}, live, nil
}

func liveCollectors(src collector.Source, clock func() time.Time) []prometheus.Collector {
	return []prometheus.Collector{
		collector.NewHealth(src, clock),
		versioncollector.NewCollector("gpureclaim_exporter"),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
}

func registerAll(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-exporter:", err)
		return 2
	}
	if o.printVersion {
		fmt.Fprintln(stdout, version.Print("gpureclaim-exporter"))
		return 0
	}
	logger, err := logging.New(o.logLevel, o.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-exporter:", err)
		return 2
	}
	var n *node
	if o.simulate != "" {
		n, err = simulatedNode(o, logger)
	} else {
		n, err = realNode(o, logger)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpureclaim-exporter:", err)
		return 1
	}
	defer n.close()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var hist *action.History
	if o.actionTokenFile != "" {
		hist = action.NewHistory(o.actionWindow)
	}
	scfg := sampler.Config{NVML: n.nvml, Node: n.name, Proc: n.proc, Allocations: n.allocs, Pods: n.pods, Logger: logger}
	if hist != nil {
		scfg.OnSample = hist.Record
	}
	smp := sampler.New(scfg)
	go smp.Run(ctx, o.interval)
	if n.sim != nil && o.simulateKubeconfig != "" {
		w, err := newPodWatch(o.simulateKubeconfig, n.sim, n.name, logger)
		if err != nil {
			fmt.Fprintln(stderr, "gpureclaim-exporter: --simulate.kubeconfig:", err)
			return 1
		}
		go w.run(ctx, o.interval)
	}

	g, live, err := gatherer(smp, time.Now)
	if err != nil {
		logger.Error("registering collectors", "err", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle(o.metricsPath, promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError), MaxRequestsInFlight: 10}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "<html><head><title>gpureclaim exporter</title></head><body><h1>gpureclaim exporter</h1><p>Node %s. <a href=%q>Metrics</a></p></body></html>\n", n.name, o.metricsPath)
	})
	servers := []*http.Server{{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	addrs := []string{o.listen}
	if hist != nil {
		h, err := actionHandler(o, n, smp, hist, live, logger)
		if err != nil {
			fmt.Fprintln(stderr, "gpureclaim-exporter:", err)
			return 1
		}
		if o.actionListen == "" {
			mux.Handle("/api/v1/units/", h)
		} else {
			amux := http.NewServeMux()
			amux.Handle("/api/v1/units/", h)
			servers = append(servers, &http.Server{Handler: amux, ReadHeaderTimeout: 10 * time.Second})
			addrs = append(addrs, o.actionListen)
		}
		logger.Info("node action endpoint on", "address", addrs[len(addrs)-1], "kill_grace", o.actionGrace, "idle_window", o.actionWindow)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			errc <- web.ListenAndServe(srv, &web.FlagConfig{WebListenAddresses: &[]string{addrs[i]}, WebConfigFile: &o.webConfig}, logger)
		}()
	}
	code := 0
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serving HTTP", "err", err)
			code = 1
		}
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(shutdown)
	}
	return code
}

// actionHandler builds the node action endpoint; its metrics join the
// exporter's.
func actionHandler(o *options, n *node, smp *sampler.Sampler, hist *action.History, reg prometheus.Registerer, logger *slog.Logger) (http.Handler, error) {
	b, err := os.ReadFile(o.actionTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--action.token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, fmt.Errorf("--action.token-file: %s is empty", o.actionTokenFile)
	}
	var sig action.Signaler = action.OS{Proc: n.proc}
	if n.sim != nil {
		sig = action.Simulated{Sim: n.sim}
	}
	var exempt []string
	for _, u := range strings.Split(o.actionExemptUsers, ",") {
		if u = strings.TrimSpace(u); u != "" {
			exempt = append(exempt, u)
		}
	}
	return action.New(action.Config{
		Token: token, Grace: o.actionGrace, IdleWindow: o.actionWindow, IdleThreshold: o.actionThreshold,
		ExemptUsers: exempt, Logger: logger,
	}, smp, hist, sig, reg), nil
}
