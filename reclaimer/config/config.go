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
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	amlabels "github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Actions a policy can take.
const (
	ActionAuto      = "auto" // the action the alert suggests (its action label)
	ActionNotify    = "notify"
	ActionKill      = "kill"
	ActionEvict     = "evict"
	ActionScaleDown = "scale_down"
	// ActionStop stops a pod's top owner the way its controller expects
	// (suspend a Job, deactivate a Kueue Workload, stop a notebook or a
	// JupyterHub server, scale a Deployment): see Workload.
	ActionStop = "stop"
	// ActionCancel cancels a Slurm job through slurmrestd, so its
	// allocation, not only its processes, gives the GPUs back.
	ActionCancel = "cancel"
	// ActionRequeue requeues a requeue-able batch job (it runs again when
	// GPUs are free) and cancels any other job.
	ActionRequeue = "requeue"
)

// FreeingActions are the actions that free a unit (the others decide or
// only notify).
var FreeingActions = []string{ActionKill, ActionEvict, ActionScaleDown, ActionStop, ActionCancel, ActionRequeue}

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

// Webhook is how Alertmanager authenticates to POST /webhook: a bearer
// token, basic auth, or both (either one passes).
type Webhook struct {
	// BearerTokenFile holds the token Alertmanager sends
	// (http_config.authorization of its webhook receiver).
	BearerTokenFile string `yaml:"bearer_token_file"`
	// BasicAuth is the user and password Alertmanager sends instead
	// (http_config.basic_auth).
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// MaxBodyBytes bounds a notification's size. Default 32MiB: about
	// 70,000 alerts; a notification refused for its size is never retried.
	MaxBodyBytes Bytes `yaml:"max_body_bytes"`
	// MaxConcurrent bounds the notifications read and decoded at once, so
	// that memory stays near MaxConcurrent times MaxBodyBytes whatever
	// Alertmanager sends; the others wait for a turn. Default 4.
	MaxConcurrent int `yaml:"max_concurrent"`
	// AnswerWithin bounds how long a notification waits for its decisions
	// to be written on a store with a journal (kubernetes): then it is
	// journaled and answered while they are still written (Alertmanager
	// would time out and retry). Default 1s.
	AnswerWithin Duration `yaml:"answer_within"`

	BearerToken string `yaml:"-"`
}

// DefaultQPS is kubernetes.qps unless set: 10,000 reclaims of one
// notification persisted in under 30 s where the apiserver allows it.
const DefaultQPS = 500

// Web is who may read the status page and the API (GET / and GET
// /api/v1/...). The webhook, Slack's interactions, the restore call and the
// health probes have their own auth, or none.
type Web struct {
	Auth WebAuth `yaml:"auth"`
}

// WebAuth is a bearer token, basic auth (either passes), or none: true said
// outright: the page shows owners, Unix users and Slack ids.
type WebAuth struct {
	// BearerTokenFile holds the token a reader sends.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// BasicAuth is a reader's user and password.
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// None lets anyone read, said outright.
	None bool `yaml:"none"`

	BearerToken string `yaml:"-"`
}

// BasicAuth is a username and a password read from a file.
type BasicAuth struct {
	// Username is the user the caller sends.
	Username string `yaml:"username"`
	// PasswordFile holds the password the caller sends.
	PasswordFile string `yaml:"password_file"`

	Password string `yaml:"-"`
}

// Alertmanager is where the reclaimer re-checks alerts and creates silences.
type Alertmanager struct {
	// URL of Alertmanager (its API v2 is under /api/v2). Required.
	URL  string     `yaml:"url"`
	HTTP HTTPClient `yaml:",inline"`
	// Timeout of one API call. Default 10s.
	Timeout Duration `yaml:"timeout"`
}

// Kubernetes is the cluster the reclaimer evicts and scales in.
type Kubernetes struct {
	// Enabled turns the Kubernetes actions and checks on. Default true.
	Enabled *bool `yaml:"enabled"`
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster config.
	Kubeconfig string `yaml:"kubeconfig"`
	// EvictionDeadline is how long an eviction a PodDisruptionBudget refuses is retried. Default 10m.
	EvictionDeadline Duration `yaml:"eviction_deadline"`
	// Events writes Kubernetes Events on the pod or workload. Default true.
	Events *bool `yaml:"events"`
	// Kueue: how jobs that Kueue admits are stopped.
	Kueue Kueue `yaml:"kueue"`
	// JupyterHub, when set, stops single-user servers through the hub's
	// API; without it their pods are evicted.
	JupyterHub *JupyterHub `yaml:"jupyterhub"`
	// QPS and Burst bound the reclaimer's requests to the apiserver (a
	// token bucket, as every client-go client has; client-go's own 5 and
	// 10 persist 1,000 reclaims in 200 s). Default DefaultQPS and twice
	// that: a burst of reclaims is written as fast as the apiserver's
	// priority and fairness lets this client.
	QPS   float32 `yaml:"qps"`
	Burst int     `yaml:"burst"`
	// DRADrivers are the DRA drivers whose devices are GPUs, as the
	// exporters' --kubelet.dra-drivers: a pod's ResourceClaims allocated by
	// them hold its GPUs. Default names.DRADrivers.
	DRADrivers []string `yaml:"dra_drivers"`
}

// On says whether Kubernetes is used.
func (k Kubernetes) On() bool { return k.Enabled == nil || *k.Enabled }

// EventsOn says whether Events are written.
func (k Kubernetes) EventsOn() bool { return k.Events == nil || *k.Events }

// Nodes is how the reclaimer reaches the exporters' action endpoints.
type Nodes struct {
	// URLTemplate builds a node's action endpoint from its name, e.g.
	// "http://{{ .Node }}:9848". Default "http://{{ .Node }}:9848".
	URLTemplate string `yaml:"url_template"`
	// Addresses override the template per node.
	Addresses map[string]string `yaml:"addresses"`
	HTTP      HTTPClient        `yaml:",inline"`
	// Timeout of one call; a kill waits out the node's checkpoint grace. Default 2m.
	Timeout Duration `yaml:"timeout"`
	// KillGrace is the nodes' --action.kill-grace: a kill's answer comes
	// after it, so the timeout must be longer. Default 30s.
	KillGrace Duration `yaml:"kill_grace"`

	tmpl *template.Template
}

// URL is the action endpoint of a node.
func (n Nodes) URL(node string) (string, error) {
	if a, ok := n.Addresses[node]; ok {
		return a, nil
	}
	var b strings.Builder
	if err := n.tmpl.Execute(&b, struct{ Node string }{node}); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Notifier sends messages to owners and admins.
type Notifier struct {
	// Type is log, webhook, slack or email.
	Type string `yaml:"type"`
	// URL receives a JSON POST per message (webhook), sent with HTTP.
	URL  string     `yaml:"url"`
	HTTP HTTPClient `yaml:",inline"`
	// Slack holds the Slack notifier's settings (type slack).
	Slack *Slack `yaml:"slack"`
	// Email holds the e-mail notifier's settings (type email).
	Email *Email `yaml:"email"`
}

// UnmarshalYAML starts a notifier from the HTTP client's defaults. (A
// section inline in another is decoded without its own UnmarshalYAML.)
func (n *Notifier) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Notifier
	*n = Notifier{HTTP: DefaultHTTPClient()}
	return unmarshal((*plain)(n))
}

// Exemptions are never reclaimed, whatever the policy says.
type Exemptions struct {
	// Namespaces whose pods are never reclaimed.
	Namespaces []string `yaml:"namespaces"`
	// Users (Unix, on bare metal) whose processes are never reclaimed.
	Users []string `yaml:"users"`
}

// RateLimits bound how many actions are taken per window.
type RateLimits struct {
	// Global bounds the actions of the whole fleet. Default none.
	Global *Limit `yaml:"global"`
	// PerNamespace bounds each namespace's. Default none.
	PerNamespace *Limit `yaml:"per_namespace"`
}

// Limit is at most Max actions per Per.
type Limit struct {
	// Max is the most actions a window holds, at least 1.
	Max int `yaml:"max"`
	// Per is the window, sliding: an action counts for Per after it.
	Per Duration `yaml:"per"`
}

// CircuitBreaker stops all actions while too many targets are pending at
// once (a broken exporter or rule would otherwise empty the cluster) and
// tells the admins.
type CircuitBreaker struct {
	// MaxPending opens the breaker. 0 turns it off. Default 50.
	MaxPending *int `yaml:"max_pending"`
}

// Policy decides what happens to the targets whose alerts it matches.
type Policy struct {
	// Name tells the policy apart in messages, metrics and the audit
	// trail. Required, unique.
	Name string `yaml:"name"`
	// Matchers select alerts by label, in Alertmanager's syntax
	// (alertname="GPUIdle", namespace=~"team-.*"). All must match.
	Matchers []string `yaml:"matchers"`
	// Action is auto (the alert's action label; for a pod, what its top
	// owner needs), notify, kill, evict, scale_down or stop.
	Action string `yaml:"action"`
	// Grace is the time between the warning and the action. Default 15m.
	Grace *Duration `yaml:"grace"`
	// MinRuntime spares workloads younger than this, from their start. Default 30m; 0s spares none.
	MinRuntime *Duration `yaml:"min_runtime"`
	// DryRun for this policy alone.
	DryRun bool `yaml:"dry_run"`
	// ScaleDownTo is the replica count scale_down sets. Default 0.
	ScaleDownTo int32 `yaml:"scale_down_to"`
	// Windows restrict actions to these times; none means any time.
	Windows []Window `yaml:"windows"`
	// RestoreWhen is a PromQL expression, a template over the reclaim's
	// labels (see RestoreData), that Prometheus answers with a sample when
	// the workload is wanted again: its Service's request rate, a queue's
	// length. The reclaimer then restores it (scales it back, resumes it)
	// and tells the owner. Empty: a person restores.
	RestoreWhen string `yaml:"restore_when"`
	// RestoreWithin is how long after the action restore_when is watched.
	// Default 24h.
	RestoreWithin *Duration `yaml:"restore_within"`
	// Demand, when set, makes the action wait for GPUs of the target's kind
	// to be wanted, or shortens the grace while they are.
	Demand *Demand `yaml:"demand"`

	matchers    amlabels.Matchers
	restoreWhen *template.Template
}

// RestoreWithinTime is how long restore_when is watched, defaulted.
func (p *Policy) RestoreWithinTime() time.Duration { return time.Duration(*p.RestoreWithin) }

// GraceTime is the grace, defaulted.
func (p *Policy) GraceTime() time.Duration { return time.Duration(*p.Grace) }

// MinRuntimeTime is the minimum runtime, defaulted.
func (p *Policy) MinRuntimeTime() time.Duration { return time.Duration(*p.MinRuntime) }

// Policy finds a policy by name.
func (cfg *Config) Policy(name string) *Policy {
	for i := range cfg.Policies {
		if cfg.Policies[i].Name == name {
			return &cfg.Policies[i]
		}
	}
	return nil
}

// Matches says whether the policy applies to an alert's labels.
func (p *Policy) Matches(lset model.LabelSet) bool { return p.matchers.Matches(lset) }

// Window is a time of day (and days of the week) when actions may run.
// From after To spans midnight (22:00-06:00).
type Window struct {
	// Days of the week (mon, tue, ...); none means every day.
	Days []string `yaml:"days"`
	// From and To are times of day, HH:MM.
	From string `yaml:"from"`
	To   string `yaml:"to"`
	// Timezone of From and To (an IANA name). Default UTC.
	Timezone string `yaml:"timezone"`

	Loc      *time.Location        `yaml:"-"`
	FromMin  int                   `yaml:"-"`
	ToMin    int                   `yaml:"-"`
	Weekdays map[time.Weekday]bool `yaml:"-"`
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

// DefaultPolicies apply when the file has none: act on GPUIdle as the
// alert suggests, notify on everything else.
func DefaultPolicies() []Policy {
	return []Policy{
		{Name: "idle", Matchers: []string{`alertname="` + names.AlertIdle + `"`}, Action: ActionAuto},
		{Name: "notify", Matchers: []string{`alertname=~"GPUWasted|GPUOvercommitted|MIGInstanceOversized"`}, Action: ActionNotify},
	}
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

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	hhmm     = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)
	weekdays = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}
)

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
	if !c.readable(field, path) {
		return ""
	}
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
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

func (c *checker) basicAuth(field string, b *BasicAuth) {
	if b == nil {
		return
	}
	if b.Username == "" {
		c.errorf(field+".username", "is required")
	}
	if b.PasswordFile == "" {
		c.errorf(field+".password_file", "is required")
	}
	b.Password = c.secret(field+".password_file", b.PasswordFile)
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

	w := &cfg.Webhook
	if w.BearerTokenFile == "" && w.BasicAuth == nil {
		c.errorf("webhook", "needs bearer_token_file or basic_auth: the webhook never accepts unauthenticated notifications")
	}
	w.BearerToken = c.secret("webhook.bearer_token_file", w.BearerTokenFile)
	c.basicAuth("webhook.basic_auth", w.BasicAuth)
	if w.MaxBodyBytes == 0 {
		w.MaxBodyBytes = 32 << 20
	}
	if w.MaxConcurrent == 0 {
		w.MaxConcurrent = 4
	}
	if w.MaxConcurrent < 1 || w.MaxConcurrent > 1024 {
		c.errorf("webhook.max_concurrent", "%d is not from 1 to 1024", w.MaxConcurrent)
	}
	if w.AnswerWithin == 0 {
		w.AnswerWithin = Duration(time.Second)
	}
	if w.AnswerWithin < 0 || time.Duration(w.AnswerWithin) > 30*time.Second {
		c.errorf("webhook.answer_within", "%s is not from 0s to 30s: Alertmanager stops waiting for an answer", time.Duration(w.AnswerWithin))
	}
	if w.MaxBodyBytes < 1024 {
		c.errorf("webhook.max_body_bytes", "%d is too small for one notification (at least 1KiB)", w.MaxBodyBytes)
	}

	wa := &cfg.Web.Auth
	switch {
	case wa.None && (wa.BearerTokenFile != "" || wa.BasicAuth != nil):
		c.errorf("web.auth", "none: true and credentials: choose one")
	case !wa.None && wa.BearerTokenFile == "" && wa.BasicAuth == nil:
		c.errorf("web.auth", "is required: bearer_token_file, basic_auth, or none: true (the status page and the API show owners, Unix users and Slack ids)")
	}
	wa.BearerToken = c.secret("web.auth.bearer_token_file", wa.BearerTokenFile)
	c.basicAuth("web.auth.basic_auth", wa.BasicAuth)

	am := &cfg.Alertmanager
	c.url("alertmanager.url", am.URL, true)
	c.httpClient("alertmanager", &am.HTTP)
	c.duration("alertmanager.timeout", &am.Timeout, 10*time.Second)

	k := &cfg.Kubernetes
	c.duration("kubernetes.eviction_deadline", &k.EvictionDeadline, 10*time.Minute)
	if k.QPS == 0 {
		k.QPS = DefaultQPS
	}
	if k.Burst == 0 {
		k.Burst = 2 * int(k.QPS)
	}
	if k.QPS < 0 || k.QPS > 10000 {
		c.errorf("kubernetes.qps", "%g is not from 0 to 10000", k.QPS)
	}
	if k.Burst < 1 || float32(k.Burst) < k.QPS {
		c.errorf("kubernetes.burst", "%d must be at least 1 and at least kubernetes.qps (%g)", k.Burst, k.QPS)
	}
	if k.DRADrivers == nil {
		k.DRADrivers = names.DRADrivers
	}
	for i, d := range k.DRADrivers {
		if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
			c.errorf(fmt.Sprintf("kubernetes.dra_drivers[%d]", i), "%q is not a driver name: %s", d, strings.Join(errs, "; "))
		}
	}
	if k.Kubeconfig != "" {
		if !filepath.IsAbs(k.Kubeconfig) {
			k.Kubeconfig = filepath.Join(c.dir, k.Kubeconfig)
		}
		if _, err := os.Stat(k.Kubeconfig); err != nil && !c.skipSecrets {
			c.errorf("kubernetes.kubeconfig", "%v", err)
		}
	}

	cfg.Slurm.validate(c)
	cfg.Prometheus.validate(c)
	cfg.Activity.validate(c, cfg.Prometheus)
	cfg.Report.validate(c, cfg.Prometheus)
	cfg.Release.validate(c)
	n := &cfg.Nodes
	if n.URLTemplate == "" {
		n.URLTemplate = "http://{{ .Node }}:9848"
	}
	if t, err := template.New("node").Option("missingkey=error").Parse(n.URLTemplate); err != nil {
		c.errorf("nodes.url_template", "%v", err)
	} else {
		n.tmpl = t
		if u, err := n.URL("node-1"); err != nil {
			c.errorf("nodes.url_template", "%v", err)
		} else {
			c.url("nodes.url_template", u, true)
		}
	}
	for node, a := range n.Addresses {
		c.url("nodes.addresses."+node, a, true)
	}
	c.httpClient("nodes", &n.HTTP)
	c.duration("nodes.timeout", &n.Timeout, 2*time.Minute)
	c.duration("nodes.kill_grace", &n.KillGrace, 30*time.Second)
	if time.Duration(n.Timeout) < time.Duration(n.KillGrace)+killCheckMargin {
		c.errorf("nodes.timeout", "%s is too short for nodes.kill_grace %s: a kill answers after the grace and the node's check (%s more); the call would be cut off and retried while the kill runs", n.Timeout, n.KillGrace, killCheckMargin)
	}

	if len(cfg.Notifiers) == 0 {
		cfg.Notifiers = []Notifier{{Type: "log"}}
	}
	slackAt := -1
	for i := range cfg.Notifiers {
		nf := &cfg.Notifiers[i]
		field := fmt.Sprintf("notifiers[%d]", i)
		if nf.Type == "slack" {
			if slackAt >= 0 {
				// One app answers the buttons at one /slack/interactions.
				c.errorf(field+".type", "a second slack notifier (notifiers[%d] is one): one at most", slackAt)
			}
			slackAt = i
		}
		switch nf.Type {
		case "log":
		case "webhook":
			c.url(field+".url", nf.URL, true)
			c.httpClient(field, &nf.HTTP)
		case "slack":
			if nf.Slack == nil {
				c.errorf(field+".slack", "is required for a slack notifier")
			} else {
				nf.Slack.validate(c, field+".slack")
			}
		case "email":
			if nf.Email == nil {
				c.errorf(field+".email", "is required for an email notifier")
			} else {
				nf.Email.validate(c, field+".email")
			}
		default:
			c.errorf(field+".type", "%q is not one of log, webhook, slack, email", nf.Type)
		}
		if nf.Type != "slack" && nf.Slack != nil {
			c.errorf(field+".slack", "is only for type slack")
		}
		if nf.Type != "email" && nf.Email != nil {
			c.errorf(field+".email", "is only for type email")
		}
		if nf.Type != "webhook" && (nf.URL != "" || httpClientSet(&nf.HTTP)) {
			c.errorf(field, "url, credentials, tls_config and the other HTTP settings are only for type webhook")
		}
	}

	for i, ns := range cfg.Exemptions.Namespaces {
		if !dnsLabel.MatchString(ns) {
			c.errorf(fmt.Sprintf("exemptions.namespaces[%d]", i), "%q is not a namespace name", ns)
		}
	}
	for _, lim := range []struct {
		name string
		l    *Limit
	}{{"rate_limits.global", cfg.RateLimits.Global}, {"rate_limits.per_namespace", cfg.RateLimits.PerNamespace}} {
		name, l := lim.name, lim.l
		if l == nil {
			continue
		}
		if l.Max < 1 {
			c.errorf(name+".max", "%d; allow at least 1 action (or leave the limit out)", l.Max)
		}
		if l.Per <= 0 {
			c.errorf(name+".per", "must be a positive duration (e.g. 1h)")
		}
	}
	if cfg.CircuitBreaker.MaxPending == nil {
		def := 50
		cfg.CircuitBreaker.MaxPending = &def
	}
	if *cfg.CircuitBreaker.MaxPending < 0 {
		c.errorf("circuit_breaker.max_pending", "must not be negative (0 turns the breaker off)")
	}
	c.duration("warning_deadline", &cfg.WarningDeadline, 15*time.Minute)
	c.url("status_page_url", cfg.StatusPageURL, false)
	cfg.AdminBearerToken = c.secret("admin_bearer_token_file", cfg.AdminBearerTokenFile)

	if len(cfg.Policies) == 0 {
		cfg.Policies = DefaultPolicies()
	}
	cfg.validateWorkloads(c)
	names := map[string]bool{}
	for i := range cfg.Policies {
		cfg.Policies[i].validate(c, fmt.Sprintf("policies[%d]", i), names)
		cfg.Policies[i].validateRestore(c, fmt.Sprintf("policies[%d]", i), cfg.Prometheus)
		cfg.Policies[i].validateDemand(c, fmt.Sprintf("policies[%d]", i), cfg.Prometheus)
		switch a := cfg.Policies[i].Action; {
		case (a == ActionCancel || a == ActionRequeue) && !cfg.Slurm.On():
			c.errorf(fmt.Sprintf("policies[%d].action", i), "%s goes through slurmrestd: set slurm.url", a)
		case a == ActionRequeue && !c.skipSecrets:
			if _, err := exec.LookPath(cfg.Slurm.Scontrol); err != nil {
				c.errorf("slurm.scontrol", "a requeue runs scontrol on this host: %v", err)
			}
		}
	}
	cfg.Warnings = c.warns
	return errors.Join(c.errs...)
}

func (p *Policy) validate(c *checker, field string, names map[string]bool) {
	if p.Name == "" {
		c.errorf(field+".name", "is required")
	} else if names[p.Name] {
		c.errorf(field+".name", "%q is used by another policy", p.Name)
	}
	names[p.Name] = true
	if len(p.Matchers) == 0 {
		c.errorf(field+".matchers", "is required (a policy for every alert is too broad to be safe)")
	}
	p.matchers = nil
	for j, m := range p.Matchers {
		lm, err := amlabels.ParseMatcher(m)
		if err != nil {
			c.errorf(fmt.Sprintf("%s.matchers[%d]", field, j), "%v", err)
			continue
		}
		p.matchers = append(p.matchers, lm)
	}
	switch p.Action {
	case ActionAuto, ActionNotify, ActionKill, ActionEvict, ActionScaleDown, ActionStop, ActionCancel, ActionRequeue:
	case "":
		c.errorf(field+".action", "is required: auto, notify, kill, evict, scale_down, stop, cancel or requeue")
	default:
		c.errorf(field+".action", "%q is not one of auto, notify, kill, evict, scale_down, stop, cancel, requeue", p.Action)
	}
	p.Grace = c.optDuration(field+".grace", p.Grace, 15*time.Minute)
	p.MinRuntime = c.optDuration(field+".min_runtime", p.MinRuntime, 30*time.Minute)
	if p.ScaleDownTo < 0 {
		c.errorf(field+".scale_down_to", "must not be negative")
	}
	for j := range p.Windows {
		p.Windows[j].validate(c, fmt.Sprintf("%s.windows[%d]", field, j))
	}
}

func (w *Window) validate(c *checker, field string) {
	tz := w.Timezone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		c.errorf(field+".timezone", "%q is not a time zone (e.g. Europe/Berlin)", w.Timezone)
	}
	w.Loc = loc
	for _, f := range []struct {
		name string
		v    string
		out  *int
	}{{"from", w.From, &w.FromMin}, {"to", w.To, &w.ToMin}} {
		m := hhmm.FindStringSubmatch(f.v)
		if m == nil {
			c.errorf(field+"."+f.name, "%q is not a time of day (HH:MM)", f.v)
			continue
		}
		h, _ := strconv.Atoi(m[1]) // the pattern matched digits
		mi, _ := strconv.Atoi(m[2])
		*f.out = h*60 + mi
	}
	if w.From != "" && w.From == w.To {
		c.errorf(field, "from and to are both %s: an empty window", w.From)
	}
	w.Weekdays = map[time.Weekday]bool{}
	for k, d := range w.Days {
		wd, ok := weekdays[strings.ToLower(d)]
		if !ok {
			c.errorf(fmt.Sprintf("%s.days[%d]", field, k), "%q is not a day (mon, tue, ...)", d)
		}
		w.Weekdays[wd] = true
	}
}
