package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	promql "github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/configtest"
)

func TestGoodConfig(t *testing.T) {
	c, err := Load("testdata/conf.good.yml")
	require.NoError(t, err)
	require.Equal(t, "am-webhook-token", c.Webhook.BearerToken, "secrets come from their files")
	require.Equal(t, "s3cret", c.Webhook.BasicAuth.Password)
	require.EqualValues(t, 8<<20, c.Webhook.MaxBodyBytes)
	require.Equal(t, 8, c.Webhook.MaxConcurrent)
	require.EqualValues(t, 20, c.Kubernetes.QPS)
	require.Equal(t, 40, c.Kubernetes.Burst)
	require.False(t, c.Kubernetes.On())
	require.Equal(t, "xoxb-test", c.Notifiers[2].Slack.Token)
	require.Equal(t, "admin-token", c.AdminBearerToken)
	require.Empty(t, c.Warnings)
	require.Equal(t, filepath.Join("testdata", "node.token"), c.Nodes.HTTP.Authorization.CredentialsFile, "relative to the config's folder")
	require.Equal(t, "Bearer", c.Nodes.HTTP.Authorization.Type)
	require.Equal(t, filepath.Join("testdata", "client.key"), c.Nodes.HTTP.TLSConfig.KeyFile)
	require.Equal(t, "reclaimer", c.Alertmanager.HTTP.BasicAuth.Username)
	require.Equal(t, "gpureclaim", c.Prometheus.HTTP.OAuth2.ClientID)
	require.True(t, c.Prometheus.HTTP.FollowRedirects, "Prometheus's defaults")
	require.True(t, c.Notifiers[1].HTTP.EnableHTTP2, "a notifier starts from the defaults too")
	require.Equal(t, "proxy.example.com:3128", c.Notifiers[1].HTTP.ProxyURL.Host)
	require.False(t, c.Notifiers[1].HTTP.ProxyFromEnvironment, "its proxy_url replaces the environment's")
	require.True(t, c.Prometheus.HTTP.ProxyFromEnvironment, "the environment's proxy, as before")
	_, err = c.Nodes.URL("gpu-node-7")
	require.ErrorContains(t, err, `node "gpu-node-7" is not in nodes.addresses`, "a list of addresses is the list of nodes")
	u, _ := c.Nodes.URL("gpu-node-1")
	require.Equal(t, "http://10.0.0.11:9848", u)
	c.Nodes.Addresses = nil
	u, err = c.Nodes.URL("gpu-node-7")
	require.NoError(t, err)
	require.Equal(t, "https://gpu-node-7.gpu.example.com:9848", u)
	require.Len(t, c.Policies, 4)
	require.Equal(t, 10*time.Minute, c.Policies[0].GraceTime())
	require.Equal(t, 15*time.Minute, c.Policies[1].GraceTime(), "defaulted")
	require.True(t, c.Policies[0].Matches(model.LabelSet{"alertname": "GPUIdle", "namespace": "data-science"}))
	require.False(t, c.Policies[0].Matches(model.LabelSet{"alertname": "GPUIdle", "namespace": "research"}))
	w := c.Policies[1].Windows[0]
	require.Equal(t, 22*60, w.FromMin)
	require.Equal(t, "Europe/Berlin", w.Loc.String())
	require.Equal(t, 40, *c.CircuitBreaker.MaxPending)
	require.True(t, c.Prometheus.On())
	require.Equal(t, 12*time.Hour, c.Policies[1].RestoreWithinTime())
	require.Equal(t, 24*time.Hour, c.Policies[0].RestoreWithinTime(), "defaulted")
	q, err := c.Policies[1].RestoreQuery(RestoreData{"namespace": "ml", RestoreWorkloadName: "llama"})
	require.NoError(t, err)
	require.Equal(t, `sum(rate(http_requests_total{namespace="ml", service="llama"}[2m])) > 0`, q)
	_, err = c.Policies[1].RestoreQuery(RestoreData{"namespace": "ml"})
	require.ErrorContains(t, err, "workload_name", "a label the reclaim lacks is an error, not an empty matcher")
	q, err = c.Policies[0].RestoreQuery(RestoreData{"namespace": "ml"})
	require.NoError(t, err)
	require.Empty(t, q, "no restore_when: nothing to ask")
}

func TestDefaults(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t"), []byte("x"), 0o600))
	c, err := Parse([]byte("webhook: {bearer_token_file: t}\nweb: {auth: {none: true}}\nalertmanager: {url: \"http://am:9093\"}\n"), dir)
	require.NoError(t, err)
	require.EqualValues(t, 32<<20, c.Webhook.MaxBodyBytes)
	require.Equal(t, 4, c.Webhook.MaxConcurrent)
	require.EqualValues(t, 500, c.Kubernetes.QPS)
	require.Equal(t, 1000, c.Kubernetes.Burst)
	require.Equal(t, Duration(time.Second), c.Webhook.AnswerWithin)
	require.True(t, c.Kubernetes.On())
	require.Equal(t, Duration(10*time.Minute), c.Kubernetes.EvictionDeadline)
	require.Equal(t, 50, *c.CircuitBreaker.MaxPending)
	require.Equal(t, []Notifier{{Type: "log"}}, c.Notifiers)
	require.Len(t, c.Policies, 2, "act on GPUIdle as it suggests, notify on the rest")
	require.Equal(t, ActionAuto, c.Policies[0].Action)
	require.Equal(t, 30*time.Minute, c.Policies[0].MinRuntimeTime())
	c, err = Parse([]byte("webhook: {bearer_token_file: t}\nweb: {auth: {none: true}}\nalertmanager: {url: \"http://am:9093\"}\npolicies: [{name: p, matchers: ['a=\"b\"'], action: evict, grace: 0s, min_runtime: 0s}]\n"), dir)
	require.NoError(t, err)
	require.Zero(t, c.Policies[0].GraceTime(), "0s is a value, not a missing field")
	require.Zero(t, c.Policies[0].MinRuntimeTime())
	u, _ := c.Nodes.URL("n1")
	require.Equal(t, "http://n1:9848", u)
}

// The first releases' bearer_token_file and a hub's token_file still load,
// as authorization, with a warning that names the key and what to write.
func TestDeprecatedCredentialKeys(t *testing.T) {
	c, err := Parse([]byte(`
webhook: {bearer_token_file: webhook.token}
web: {auth: {none: true}}
alertmanager: {url: "http://am:9093", bearer_token_file: admin.token}
nodes: {bearer_token_file: node.token}
kubernetes: {jupyterhub: {url: "http://hub:8081/hub/api", token_file: admin.token}}
`), "testdata")
	require.NoError(t, err)
	require.Equal(t, &promconfig.Authorization{Type: "Bearer", CredentialsFile: "testdata/node.token"}, c.Nodes.HTTP.Authorization)
	require.Equal(t, &promconfig.Authorization{Type: "Bearer", CredentialsFile: "testdata/admin.token"}, c.Alertmanager.HTTP.Authorization)
	require.Equal(t, &promconfig.Authorization{Type: "token", CredentialsFile: "testdata/admin.token"}, c.Kubernetes.JupyterHub.HTTP.Authorization)
	require.Equal(t, []string{
		"alertmanager.bearer_token_file: is deprecated and goes in a later release: write authorization: {credentials_file: admin.token}",
		"kubernetes.jupyterhub.token_file: is deprecated and goes in a later release: write authorization: {type: token, credentials_file: admin.token}",
		"nodes.bearer_token_file: is deprecated and goes in a later release: write authorization: {credentials_file: node.token}",
	}, slices.Sorted(slices.Values(c.Warnings)))
}

func TestBadConfigsNameTheField(t *testing.T) {
	configtest.BadCases(t, func(path string) error {
		_, err := Load(path)
		return err
	})
}

// The backtest reads a config written for the reclaimer's host, whose
// secret files are not here: everything else is still checked.
func TestLoadWithoutSecrets(t *testing.T) {
	_, err := Load("../reclaimer.example.yml")
	require.ErrorContains(t, err, "webhook.bearer_token_file")
	c, err := LoadWithoutSecrets("../reclaimer.example.yml")
	require.NoError(t, err)
	require.Empty(t, c.Webhook.BearerToken)
	require.Len(t, c.Policies, 2)

	bad := filepath.Join(t.TempDir(), "bad.yml")
	require.NoError(t, os.WriteFile(bad, []byte("webhook: {bearer_token_file: /nowhere}\nalertmanager: {url: ftp://x}\n"), 0o644))
	_, err = LoadWithoutSecrets(bad)
	require.ErrorContains(t, err, `alertmanager.url: "ftp://x" is not an http(s) URL`)
}

// The built-in workload kinds are entries of the config's own shape: the
// config turns one off by name, replaces one, or adds its own.
func TestWorkloads(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "t"), []byte("x"), 0o600))
	base := "webhook: {bearer_token_file: t}\nweb: {auth: {none: true}}\nalertmanager: {url: \"http://am:9093\"}\n"
	c, err := Parse([]byte(base), dir)
	require.NoError(t, err)
	require.Len(t, c.Workloads, len(BuiltinWorkloads()))
	require.True(t, c.Kubernetes.Kueue.On())
	job, ok := c.WorkloadFor("batch", "Job")
	require.True(t, ok)
	require.JSONEq(t, `{"spec":{"suspend":true}}`, string(job.StopPatch))
	require.JSONEq(t, `{"spec":{"suspend":false}}`, string(job.RestorePatch))
	pj, _ := c.WorkloadFor("kubeflow.org", "PyTorchJob")
	require.JSONEq(t, `{"spec":{"runPolicy":{"suspend":true}}}`, string(pj.StopPatch))
	nb, _ := c.WorkloadFor("kubeflow.org", "Notebook")
	require.JSONEq(t, `{"metadata":{"annotations":{"kubeflow-resource-stopped":null}}}`, string(nb.RestorePatch))
	d, _ := c.WorkloadFor("apps", "Deployment")
	require.Equal(t, StopScale, d.Method())

	c, err = Parse([]byte(base+`kubernetes: {kueue: {enabled: false}}
workloads:
  - {name: job, disabled: true}
  - {name: run, group: example.com, version: v1, kind: TrainingRun, resource: trainingruns, stop: {spec: {paused: true}}, restore: {spec: {paused: false}}}
  - {name: notebook, disabled: true}
  - {name: notebook-scaled, group: kubeflow.org, version: v1, kind: Notebook, resource: notebooks, scale: true}
`), dir)
	require.NoError(t, err)
	require.False(t, c.Kubernetes.Kueue.On())
	_, ok = c.WorkloadFor("batch", "Job")
	require.False(t, ok, "turned off")
	run, ok := c.WorkloadFor("example.com", "TrainingRun")
	require.True(t, ok)
	require.Equal(t, "stopped", run.Stopped, "the verbs default")
	require.JSONEq(t, `{"spec":{"paused":true}}`, string(run.StopPatch))
	nb, _ = c.WorkloadFor("kubeflow.org", "Notebook")
	require.True(t, nb.Scale, "a built-in kind disabled and declared anew")
	require.Len(t, c.Workloads, len(BuiltinWorkloads())+2)
}

// The report is due at its day and time of the week, in its time zone.
func TestReportNext(t *testing.T) {
	c := &checker{}
	r := Report{Day: "mon", At: "09:00", Timezone: "Europe/Berlin"}
	r.validate(c, Prometheus{URL: "http://prom:9090"})
	require.Empty(t, c.errs)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	wed := time.Date(2026, 12, 2, 12, 0, 0, 0, berlin) // a Wednesday
	require.Equal(t, time.Date(2026, 12, 7, 9, 0, 0, 0, berlin), r.Next(wed))
	mon := time.Date(2026, 12, 7, 9, 0, 0, 0, berlin)
	require.Equal(t, time.Date(2026, 12, 14, 9, 0, 0, 0, berlin), r.Next(mon), "not again at the same time")
	require.Equal(t, mon, r.Next(mon.Add(-time.Minute)))
}

// The demand query names the resource a unit is asked by; a MIG profile
// from an alert's labels is made a label-value-safe word, whatever it holds.
func TestWantedQuery(t *testing.T) {
	require.Equal(t, `resource:gpureclaim_gpus_wanted:sum{resource="nvidia_com_gpu"} > 0`, WantedQuery("gpu", ""))
	require.Equal(t, `resource:gpureclaim_gpus_wanted:sum{resource="nvidia_com_mig_1g_10gb"} > 0`, WantedQuery("mig", "1g.10gb"))
	hostile := WantedQuery("mig", `x"} or vector(1) or {a="`)
	expr, err := promql.NewParser(promql.Options{}).ParseExpr(hostile)
	require.NoError(t, err)
	require.Equal(t, `resource:gpureclaim_gpus_wanted:sum{resource="nvidia_com_mig_x___or_vector_1__or__a__"} > 0`, expr.String(), "one matcher, whole")
}
