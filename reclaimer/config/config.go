// Package config loads and validates the reclaimer's configuration. Every
// field has a default or is required; an error names the field and says
// what is wrong. The secrets the reclaimer checks (the webhook's, the
// status page's) are read from files (*_file); the clients it calls out
// with are configured as Prometheus configures its own (HTTPClient).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Action is what a policy does to a target: the word in the config, on
// the alert's action label, in the record and on the metrics.
type Action string

// Actions a policy can take.
const (
	ActionAuto      Action = "auto" // the action the alert suggests (its action label)
	ActionNotify    Action = "notify"
	ActionKill      Action = "kill"
	ActionEvict     Action = "evict"
	ActionScaleDown Action = "scale_down"
	// ActionStop stops a pod's top owner the way its controller expects
	// (suspend a Job, deactivate a Kueue Workload, stop a notebook or a
	// JupyterHub server, scale a Deployment): see Workload.
	ActionStop Action = "stop"
	// ActionCancel cancels a Slurm job through slurmrestd, so its
	// allocation, not only its processes, gives the GPUs back.
	ActionCancel Action = "cancel"
	// ActionRequeue requeues a requeue-able batch job (it runs again when
	// GPUs are free) and cancels any other job.
	ActionRequeue Action = "requeue"
)

// FreeingActions are the actions that free a unit (the others decide or
// only notify).
var FreeingActions = []Action{ActionKill, ActionEvict, ActionScaleDown, ActionStop, ActionCancel, ActionRequeue}

// killCheckMargin is what a node's kill takes beyond its grace: signalling,
// then polling for the processes' end.
const killCheckMargin = 10 * time.Second

// defaultHubTimeout bounds one call to JupyterHub's API.
const defaultHubTimeout = 30 * time.Second

// Config is the reclaimer's configuration file.
type Config struct {
	// DryRun records and logs every decision but never kills, evicts or
	// scales, and sends no owner warnings.
	DryRun       bool         `yaml:"dry_run"`
	Webhook      Webhook      `yaml:"webhook"`
	Web          Web          `yaml:"web"`
	Alertmanager Alertmanager `yaml:"alertmanager"`
	Kubernetes   Kubernetes   `yaml:"kubernetes"`
	Nodes        Nodes        `yaml:"nodes"`
	Slurm        Slurm        `yaml:"slurm"`
	Prometheus   Prometheus   `yaml:"prometheus"`
	Activity     Activity     `yaml:"activity"`
	Report       Report       `yaml:"report"`
	// Notifiers tell owners and admins. Default: the log alone.
	Notifiers      []Notifier     `yaml:"notifiers"`
	Exemptions     Exemptions     `yaml:"exemptions"`
	RateLimits     RateLimits     `yaml:"rate_limits"`
	CircuitBreaker CircuitBreaker `yaml:"circuit_breaker"`
	// Policies decide, the first that matches an alert. Default
	// DefaultPolicies.
	Policies []Policy `yaml:"policies"`
	// Workloads are the kinds of top owner the reclaimer stops, over the
	// built-in ones; after loading, every kind, built-in ones included.
	Workloads []Workload `yaml:"workloads"`
	// Release is how long each kind may take to free the GPU after its stop.
	Release Release `yaml:"release"`
	// WarningDeadline is how long an owner's warning may fail to go out
	// before the admins are told; the reclaim waits for it either way.
	// Default 15m.
	WarningDeadline Duration `yaml:"warning_deadline"`
	// Cluster is the cluster this reclaimer acts in, in a fleet of several
	// whose alerts meet in one Alertmanager: an alert whose ClusterLabel
	// names another cluster, or none, is refused (counted as the decision
	// other_cluster and logged), never acted on and never messaged; every
	// query to prometheus.url is kept to it. Empty: one cluster, every
	// alert is its own.
	Cluster string `yaml:"cluster"`
	// ClusterLabel is the alert label that names the cluster, as the
	// rules' cluster_label. Default cluster.
	ClusterLabel string `yaml:"cluster_label"`
	// StatusPageURL is where people reach the status page, for links in messages.
	StatusPageURL string `yaml:"status_page_url"`
	// AdminBearerTokenFile guards the API calls that change things
	// (restore). Without it they are refused.
	AdminBearerTokenFile string `yaml:"admin_bearer_token_file"`

	AdminBearerToken string `yaml:"-"`
	// Warnings are what the file says that still works but goes in a later
	// release (a deprecated key), for the log.
	Warnings []string `yaml:"-"`

	dir         string
	skipSecrets bool
}

// Duration is a duration in Prometheus's format (30s, 5m, 1h, 7d); an
// error names the line.
type Duration model.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := model.ParseDuration(n.Value)
	if err != nil {
		if len(n.Value) > 0 && n.Value[0] == '-' {
			return fmt.Errorf("line %d: %q must not be negative", n.Line, n.Value)
		}
		return fmt.Errorf("line %d: %q is not a duration (e.g. 30s, 5m, 1h)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) String() string { return model.Duration(d).String() }

// Bytes is a size in bytes; YAML takes 4MiB, 512KB, 1048576.
type Bytes int64

func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	s := strings.TrimSpace(n.Value)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			var f float64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%g", &f); err != nil {
				return fmt.Errorf("line %d: %q is not a size (e.g. 4MiB)", n.Line, n.Value)
			}
			*b = Bytes(f * float64(u.mult))
			return nil
		}
	}
	var i int64
	if _, err := fmt.Sscanf(s, "%d", &i); err != nil {
		return fmt.Errorf("line %d: %q is not a size (e.g. 4MiB)", n.Line, n.Value)
	}
	*b = Bytes(i)
	return nil
}

// Load reads a config file; relative secret files resolve against its folder.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads, defaults and validates a config; it reads the secret files.
func Parse(b []byte, dir string) (*Config, error) { return parse(b, dir, true) }

// LoadWithoutSecrets reads and validates a config as Load does but leaves
// its secret files unread: the backtest runs the policies of a config
// written for another machine.
func LoadWithoutSecrets(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parse(b, filepath.Dir(path), false)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseWithoutSecrets validates a config without reading its secret files.
func ParseWithoutSecrets(b []byte) (*Config, error) { return parse(b, "", false) }

// DefaultWithoutSecrets is the configuration with every default, for the
// backtest: its policies are DefaultPolicies.
func DefaultWithoutSecrets() (*Config, error) {
	return parse([]byte("webhook: {bearer_token_file: unread}\nweb: {auth: {none: true}}\nalertmanager: {url: http://alertmanager:9093}\n"), "", false)
}

func parse(b []byte, dir string, secrets bool) (*Config, error) {
	c := &Config{dir: dir, skipSecrets: !secrets}
	for _, h := range []*HTTPClient{&c.Alertmanager.HTTP, &c.Prometheus.HTTP, &c.Nodes.HTTP, &c.Slurm.HTTP} {
		*h = DefaultHTTPClient()
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, locate(b, err)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

type checker struct {
	errs        []error
	warns       []string
	dir         string
	skipSecrets bool
}

func (c *checker) errorf(field, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (c *checker) warnf(field, format string, args ...any) {
	c.warns = append(c.warns, field+": "+fmt.Sprintf(format, args...))
}

// secret reads a secret file; the value must not be empty.
func (c *checker) secret(field, path string) string {
	if path == "" || c.skipSecrets {
		return ""
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.dir, path)
	}
	v, _ := c.read(field, path)
	return v
}

func (c *checker) url(field, u string, required bool) {
	if u == "" {
		if required {
			c.errorf(field, "is required")
		}
		return
	}
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		c.errorf(field, "%q is not an http(s) URL", u)
	}
}

func (c *checker) duration(field string, d *Duration, def time.Duration) {
	if *d == 0 {
		*d = Duration(def)
	}
	if *d < 0 {
		c.errorf(field, "must not be negative")
	}
}

// optDuration defaults a duration the file may set to zero on purpose.
func (c *checker) optDuration(field string, d *Duration, def time.Duration) *Duration {
	if d == nil {
		v := Duration(def)
		return &v
	}
	if *d < 0 {
		c.errorf(field, "must not be negative")
	}
	return d
}

func (cfg *Config) validate() error {
	c := &checker{dir: cfg.dir, skipSecrets: cfg.skipSecrets}
	cfg.Webhook.validate(c)
	cfg.Web.validate(c)
	cfg.Alertmanager.validate(c)
	cfg.Kubernetes.validate(c)
	cfg.Slurm.validate(c)
	cfg.Prometheus.validate(c)
	cfg.Activity.validate(c, cfg.Prometheus)
	cfg.Report.validate(c, cfg.Prometheus)
	cfg.Release.validate(c)
	cfg.Nodes.validate(c)
	cfg.validateNotifiers(c)
	cfg.Exemptions.validate(c)
	cfg.RateLimits.validate(c)
	cfg.CircuitBreaker.validate(c)
	c.duration("warning_deadline", &cfg.WarningDeadline, 15*time.Minute)
	c.url("status_page_url", cfg.StatusPageURL, false)
	if cfg.ClusterLabel == "" {
		cfg.ClusterLabel = names.LabelCluster
	}
	if !model.LegacyValidation.IsValidLabelName(cfg.ClusterLabel) {
		c.errorf("cluster_label", "%q is not a label name", cfg.ClusterLabel)
	}
	if strings.ContainsAny(cfg.Cluster, "\n\"") {
		c.errorf("cluster", "%q holds a newline or a quote", cfg.Cluster)
	}
	cfg.AdminBearerToken = c.secret("admin_bearer_token_file", cfg.AdminBearerTokenFile)
	cfg.validateWorkloads(c)
	cfg.validatePolicies(c)
	cfg.Warnings = c.warns
	return errors.Join(c.errs...)
}
