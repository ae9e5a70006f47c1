// Package server runs the exporter: its flags, the background sampler, the
// metrics and the node action endpoint over HTTP. The exporter's command
// runs it on the node's NVIDIA driver; the simulator's command
// (exporter/simulated) runs the same code on simulated GPUs.
package server

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
	"github.com/gpureclaim/gpureclaim/exporter/slurm"
	"github.com/gpureclaim/gpureclaim/internal/cli"
	"github.com/gpureclaim/gpureclaim/internal/httpserver"
	"github.com/gpureclaim/gpureclaim/internal/kubeapi"
	"github.com/gpureclaim/gpureclaim/internal/logging"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/podmeta"
	"github.com/gpureclaim/gpureclaim/internal/podresources"
	"github.com/gpureclaim/gpureclaim/internal/procfs"
)

// gcPercent is the exporter's GOGC unless the environment sets one. Its
// heap is a few MB, most of it live: collecting when it has grown by a
// quarter rather than doubled keeps about 1 MiB less resident, for a
// collection every few samples that takes well under a millisecond.
const gcPercent = 25

// Options are the exporter's flags.
type Options struct {
	Listen, MetricsPath, WebConfig string
	Interval                       time.Duration
	Node                           string
	Procfs, Passwd                 string
	PodResourcesSocket             string
	DRADrivers                     string
	ResourceSlices                 bool
	NodePods                       bool
	NodePodsInterval               time.Duration
	Kubeconfig                     string
	LogLevel, LogFormat            string
	PrintVersion                   bool

	ActionTokenFile, ActionListen string
	ActionGrace, ActionWindow     time.Duration
	ActionThreshold               float64
	ActionExemptUsers             string

	SlurmEnabled        bool
	SlurmNode, SlurmBin string
	SlurmInterval       time.Duration
}

// RegisterFlags defines the exporter's flags on fs.
func RegisterFlags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.StringVar(&o.Listen, "web.listen-address", ":9847", "Address to serve metrics on.")
	fs.StringVar(&o.MetricsPath, "web.telemetry-path", "/metrics", "Path to serve metrics under.")
	fs.StringVar(&o.WebConfig, "web.config.file", "", "Path to a web configuration file (TLS, basic auth); see the Prometheus exporter-toolkit docs.")
	fs.DurationVar(&o.Interval, "sample.interval", 5*time.Second, "How often to read NVML. Scrapes are served from the last sample.")
	fs.StringVar(&o.Node, "node-name", os.Getenv("NODE_NAME"), "Node name to report (default: $NODE_NAME, else the host name; the scenario's node when simulating).")
	fs.StringVar(&o.Procfs, "path.procfs", "/proc", "The /proc to read process owners from (the host's, from a container); empty turns process attribution off.")
	fs.StringVar(&o.Passwd, "path.passwd", "/etc/passwd", "The passwd file to name users by (the host's, from a container); empty keeps uids.")
	fs.StringVar(&o.PodResourcesSocket, "kubelet.pod-resources-socket", podresources.DefaultSocket, "The kubelet's pod-resources socket; empty turns pod attribution off.")
	fs.StringVar(&o.DRADrivers, "kubelet.dra-drivers", strings.Join(names.DRADrivers, ","), "Comma-separated DRA drivers whose devices the kubelet reports are GPUs: their holders are the pods whose ResourceClaims hold them; empty turns DRA attribution off.")
	fs.BoolVar(&o.ResourceSlices, "kubernetes.resource-slices", false, "Resolve a DRA device whose name does not follow its driver's convention through the node's ResourceSlices (the device's uuid attribute): needs list on resourceslices.resource.k8s.io, as the pod's service account or --kubernetes.kubeconfig.")
	fs.BoolVar(&o.NodePods, "kubernetes.node-pods", false, "List the node's pods (their UIDs, names and container ids) so that each process on a GPU several pods share is attributed to its own pod: needs list on pods, as the pod's service account or --kubernetes.kubeconfig. Without it such processes are unattributed, and no holder of that GPU is judged idle from its own share.")
	fs.DurationVar(&o.NodePodsInterval, "kubernetes.node-pods-interval", time.Minute, "How often --kubernetes.node-pods lists the node's pods; a process of a pod not yet listed asks for a list sooner, at most once per --sample.interval.")
	fs.StringVar(&o.Kubeconfig, "kubernetes.kubeconfig", "", "A kubeconfig with a bearer token for --kubernetes.resource-slices and --kubernetes.node-pods (default: the pod's service account).")
	fs.StringVar(&o.LogLevel, "log.level", "info", "Log level: debug, info, warn, error.")
	fs.StringVar(&o.LogFormat, "log.format", "logfmt", "Log format: logfmt or json.")
	fs.BoolVar(&o.PrintVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&o.ActionTokenFile, "action.token-file", "", "Turns the node action endpoint on: the file holds the bearer token the reclaimer must send. Off when empty.")
	fs.StringVar(&o.ActionListen, "action.listen-address", "", "Serve the action endpoint on its own address (default: under /api/v1/ of --web.listen-address).")
	fs.DurationVar(&o.ActionGrace, "action.kill-grace", 30*time.Second, "Time between SIGTERM and SIGKILL, for the workload to checkpoint.")
	fs.DurationVar(&o.ActionWindow, "action.idle-window", 5*time.Minute, "The node signals a unit's processes only if every sample of this window was idle.")
	fs.Float64Var(&o.ActionThreshold, "action.idle-threshold", names.IdleThreshold, "Activity under which a sample is idle (SM activity, else utilization).")
	fs.StringVar(&o.ActionExemptUsers, "action.exempt-users", "", "Comma-separated Unix users whose processes are never signalled.")
	fs.BoolVar(&o.SlurmEnabled, "slurm.enabled", false, "Read which Slurm jobs hold the node's GPUs by allocation (squeue, scontrol --details), so a GPU an idle salloc holds is held with no process on it.")
	fs.StringVar(&o.SlurmNode, "slurm.node-name", "", "The node's Slurm NodeName (default: --node-name).")
	fs.StringVar(&o.SlurmBin, "slurm.bin-dir", "", "Where squeue and scontrol are (default: the PATH).")
	fs.DurationVar(&o.SlurmInterval, "slurm.interval", sampler.DefaultSlurmInterval, "The least time between two reads of Slurm's allocations: each is an RPC to slurmctld from every node.")
	return o
}

// Validate checks the flags together.
func (o *Options) Validate() error {
	switch {
	case o.Interval < time.Second:
		return fmt.Errorf("--sample.interval: %s is under 1s; NVML's averages and GPM need longer", o.Interval)
	case o.ActionListen != "" && o.ActionTokenFile == "":
		return errors.New("--action.listen-address: needs --action.token-file; the endpoint never runs unauthenticated")
	case o.ActionTokenFile != "" && o.Procfs == "":
		return errors.New("--action.token-file: the action endpoint checks processes in /proc before it signals them; --path.procfs must not be empty")
	case o.ActionGrace < 0 || o.ActionWindow <= 0:
		return errors.New("--action.kill-grace must not be negative and --action.idle-window must be positive")
	case o.ActionThreshold <= 0 || o.ActionThreshold >= 1:
		return fmt.Errorf("--action.idle-threshold: %g must be between 0 and 1", o.ActionThreshold)
	case !o.SlurmEnabled && (o.SlurmNode != "" || o.SlurmBin != ""):
		return errors.New("--slurm.node-name and --slurm.bin-dir need --slurm.enabled")
	case o.Kubeconfig != "" && !o.ResourceSlices && !o.NodePods:
		return errors.New("--kubernetes.kubeconfig needs --kubernetes.resource-slices or --kubernetes.node-pods")
	case o.NodePods && o.NodePodsInterval < o.Interval:
		return fmt.Errorf("--kubernetes.node-pods-interval: %s is under --sample.interval (%s)", o.NodePodsInterval, o.Interval)
	case o.SlurmInterval < o.Interval:
		return fmt.Errorf("--slurm.interval: %s is under --sample.interval (%s)", o.SlurmInterval, o.Interval)
	}
	return nil
}

// draDrivers are the drivers of --kubelet.dra-drivers.
func (o *Options) draDrivers() []string {
	var out []string
	for _, d := range strings.Split(o.DRADrivers, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// sliceReader reads the node's ResourceSlices of the DRA drivers.
type sliceReader struct {
	api     *kubeapi.Client
	node    string
	drivers []string
}

func (r sliceReader) DeviceUUIDs(ctx context.Context) (map[podresources.Device]string, error) {
	return r.api.DeviceUUIDs(ctx, r.node, r.drivers)
}

// Node is what the exporter samples: a real or a simulated node.
type Node struct {
	NVML   nvml.Interface
	Name   string
	Proc   *procfs.FS
	Allocs sampler.AllocationLister
	Pods   podmeta.Resolver
	// Signaler ends processes for the action endpoint; nil signals real ones.
	Signaler action.Signaler
	// Start runs beside the sampler until ctx ends (a simulator's pod watch).
	Start func(ctx context.Context, interval time.Duration)
	// Slurm lists the Slurm jobs holding the node's GPUs; nil without Slurm.
	Slurm sampler.SlurmLister
	// Collectors, when set, replace the exporter's metrics of the snapshot
	// (a simulator serving another exporter's exposition).
	Collectors func(collector.Source) []prometheus.Collector
	Close      func()
}

const noDriverHelp = `NVML could not start (%s): this machine has no NVIDIA driver, or the exporter cannot load libnvidia-ml.so.1.
To run on simulated GPUs instead:  make run  (or gpureclaim-exporter-sim --simulate=demo)`

// RealNode opens the node's NVIDIA driver, /proc and kubelet socket.
func RealNode(o *Options, logger *slog.Logger) (*Node, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf(noDriverHelp, ret.Error())
	}
	n := &Node{NVML: lib, Name: o.Node, Close: func() { _ = lib.Shutdown() }} // at exit: nothing to do about an error
	if o.Procfs != "" {
		n.Proc = procfs.New(o.Procfs, o.Passwd)
	}
	if n.Name == "" {
		n.Name, _ = os.Hostname()
	}
	if o.PodResourcesSocket != "" && kubeletNode(o.PodResourcesSocket, logger) {
		c, err := kubelet(o, logger)
		if err != nil {
			return nil, err
		}
		n.Allocs = c
		prev := n.Close
		n.Close = func() { c.Close(); prev() }
	}
	return n, nil
}

// kubeletNode says whether the node runs a kubelet: the socket's folder
// exists (the kubelet makes it, and the chart mounts it). A bare-metal node
// has none, and reads no pods rather than failing to every sample.
func kubeletNode(socket string, logger *slog.Logger) bool {
	if _, err := os.Stat(filepath.Dir(socket)); err != nil {
		logger.Info("no kubelet on this node: owners come from processes and Slurm only", "folder", filepath.Dir(socket))
		return false
	}
	return true
}

// kubelet is the client of the kubelet's pod-resources socket. It dials
// on each read, so a kubelet that starts after the exporter is picked up;
// until it answers, the pod_resources step fails.
func kubelet(o *Options, logger *slog.Logger) (*podresources.Client, error) {
	if _, err := os.Stat(o.PodResourcesSocket); err != nil {
		logger.Info("no kubelet pod-resources socket yet: pods are attributed once it appears (--kubelet.pod-resources-socket= turns this off)", "socket", o.PodResourcesSocket)
	}
	c, err := podresources.Dial(o.PodResourcesSocket, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c.Drivers = o.draDrivers()
	return c, nil
}

// Main parses args (the exporter's flags and any extra ones), opens the
// node and serves until ctx ends or a signal comes. It returns the exit
// code: 2 for bad flags, 1 for a failure.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	extra func(fs *flag.FlagSet) func() error, open func(o *Options, logger *slog.Logger) (*Node, error)) int {
	cli.DefaultGCPercent(gcPercent)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := RegisterFlags(fs)
	check := func() error { return nil }
	if extra != nil {
		check = extra(fs)
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err == nil {
		err = o.Validate()
	}
	if err == nil {
		err = check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if o.PrintVersion {
		fmt.Fprintln(stdout, version.Print(name))
		return 0
	}
	logger, err := logging.New(o.LogLevel, o.LogFormat, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	n, err := open(o, logger)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer n.Close()
	if err := Run(ctx, o, n, logger); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// gatherer serves the snapshot's metrics from a cache refreshed once per
// sample, and the health, version and runtime metrics live; the live
// registry takes any other metric (the action endpoint's).
func gatherer(src collector.Source, clock func() time.Time, fromSnapshot func(collector.Source) []prometheus.Collector) (prometheus.Gatherer, *prometheus.Registry, error) {
	if fromSnapshot == nil {
		fromSnapshot = collector.FromSnapshot
	}
	cached, err := collector.NewSnapshotGatherer(src, fromSnapshot(src)...)
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

// Run samples the node and serves HTTP until ctx ends or a signal comes.
func Run(ctx context.Context, o *Options, n *Node, logger *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	var hist *action.History
	if o.ActionTokenFile != "" {
		hist = action.NewHistory(o.ActionWindow)
	}
	if o.SlurmEnabled && n.Slurm == nil {
		node := o.SlurmNode
		if node == "" {
			node = n.Name
		}
		n.Slurm = &slurm.Reader{Node: node, Bin: o.SlurmBin}
	}
	scfg := sampler.Config{NVML: n.NVML, Node: n.Name, Proc: n.Proc, Allocations: n.Allocs, Slurm: n.Slurm, SlurmInterval: o.SlurmInterval, Pods: n.Pods, Logger: logger}
	if o.ResourceSlices || o.NodePods {
		api, err := kubeapi.New(o.Kubeconfig)
		if err != nil {
			return fmt.Errorf("--kubernetes.resource-slices, --kubernetes.node-pods: %w", err)
		}
		if o.ResourceSlices {
			scfg.Slices = sliceReader{api: api, node: n.Name, drivers: o.draDrivers()}
		}
		if o.NodePods && scfg.Pods == nil {
			pods := podmeta.NewListed(func(ctx context.Context) ([]podmeta.Pod, error) { return api.NodePods(ctx, n.Name) }, o.NodePodsInterval, o.Interval)
			go pods.Run(ctx, logger)
			scfg.Pods = pods
		}
	}
	if hist != nil {
		scfg.OnSample = hist.Record
	}
	smp := sampler.New(scfg)
	go smp.Run(ctx, o.Interval)
	if n.Start != nil {
		go n.Start(ctx, o.Interval)
	}

	g, live, err := gatherer(smp, time.Now, n.Collectors)
	if err != nil {
		return fmt.Errorf("registering collectors: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(o.MetricsPath, promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError), MaxRequestsInFlight: 10}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "<html><head><title>gpureclaim exporter</title></head><body><h1>gpureclaim exporter</h1><p>Node %s. <a href=%q>Metrics</a></p></body></html>\n", n.Name, o.MetricsPath)
	})
	// A kill holds its answer for the grace, then polls for the processes' end.
	limits := httpserver.Default
	if o.ActionTokenFile != "" {
		limits.Write = max(limits.Write, o.ActionGrace+time.Minute)
	}
	servers := []*http.Server{httpserver.New(mux, limits)}
	addrs := []string{o.Listen}
	if hist != nil {
		h, err := actionHandler(o, n, smp, hist, live, logger)
		if err != nil {
			return err
		}
		if o.ActionListen == "" {
			mux.Handle("/api/v1/units/", h)
		} else {
			amux := http.NewServeMux()
			amux.Handle("/api/v1/units/", h)
			servers = append(servers, httpserver.New(amux, limits))
			addrs = append(addrs, o.ActionListen)
		}
		logger.Info("node action endpoint on", "address", addrs[len(addrs)-1], "kill_grace", o.ActionGrace, "idle_window", o.ActionWindow)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			errc <- web.ListenAndServe(srv, &web.FlagConfig{WebListenAddresses: &[]string{addrs[i]}, WebConfigFile: &o.WebConfig}, logger)
		}()
	}
	var serveErr error
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("serving HTTP: %w", err)
		}
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.Shutdown(shutdown)
	}
	return serveErr
}

// actionHandler builds the node action endpoint; its metrics join the
// exporter's.
func actionHandler(o *Options, n *Node, smp *sampler.Sampler, hist *action.History, reg prometheus.Registerer, logger *slog.Logger) (http.Handler, error) {
	b, err := os.ReadFile(o.ActionTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--action.token-file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, fmt.Errorf("--action.token-file: %s is empty", o.ActionTokenFile)
	}
	sig := n.Signaler
	if sig == nil {
		sig = action.OS{Proc: n.Proc}
	}
	var exempt []string
	for _, u := range strings.Split(o.ActionExemptUsers, ",") {
		if u = strings.TrimSpace(u); u != "" {
			exempt = append(exempt, u)
		}
	}
	return action.New(action.Config{
		Token: token, Grace: o.ActionGrace, IdleWindow: o.ActionWindow, IdleThreshold: o.ActionThreshold,
		ExemptUsers: exempt, Logger: logger,
	}, smp, hist, sig, reg), nil
}
