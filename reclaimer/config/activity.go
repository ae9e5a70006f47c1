package config

import (
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"
)

// Activity turns on GET /api/v1/activity: when a pod's GPUs were last
// active, read from Prometheus, in the shape Kubeflow Notebooks' activity
// probe writes to its OUTPUT_JSON_PATH ({"has_activity", "last_activity"}),
// so that a notebook platform's culler can use GPU activity.
type Activity struct {
	// BearerTokenFile holds the token a probe sends; the endpoint is off
	// without it. It is not the status page's token: it reads activity only.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// Lookback is how far back the last activity is looked for. Default 7d.
	Lookback Duration `yaml:"lookback"`
	// Recent: a GPU active within it counts as active now. Default 5m.
	Recent Duration `yaml:"recent"`
	// Threshold is the activity (SM activity, else utilization) above which a
	// GPU is active. Default the rules' idle threshold, 0.05.
	Threshold float64 `yaml:"threshold"`

	BearerToken string `yaml:"-"`
}

// On says whether the endpoint is served.
func (a Activity) On() bool { return a.BearerTokenFile != "" }

func (a *Activity) validate(c *checker, prom Prometheus) {
	c.duration("activity.lookback", &a.Lookback, 7*24*time.Hour)
	c.duration("activity.recent", &a.Recent, 5*time.Minute)
	if a.Threshold == 0 {
		a.Threshold = names.IdleThreshold
	}
	if a.Threshold < 0 || a.Threshold >= 1 {
		c.errorf("activity.threshold", "%g is not from 0 to 1", a.Threshold)
	}
	if a.Recent > a.Lookback {
		c.errorf("activity.recent", "%s is longer than activity.lookback (%s)", time.Duration(a.Recent), time.Duration(a.Lookback))
	}
	if !a.On() {
		return
	}
	if !prom.On() {
		c.errorf("activity.bearer_token_file", "the activity endpoint reads Prometheus: set prometheus.url")
	}
	a.BearerToken = c.secret("activity.bearer_token_file", a.BearerTokenFile)
}
