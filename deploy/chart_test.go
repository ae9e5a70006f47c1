package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/gpureclaim/gpureclaim/deploy"
	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
	rconfig "github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/rules"
)

// valueSets are the values files the chart is rendered with: its defaults,
// everything on, and the least it runs with.
var valueSets = map[string][]string{
	"defaults": nil,
	"all-on":   {"ci/all-on-values.yaml"},
	"minimal":  {"ci/minimal-values.yaml"},
	"dcgm":     {"ci/dcgm-values.yaml"},
	"bbolt":    {"ci/bbolt-values.yaml"},
}

func chart(t *testing.T) string {
	return filepath.Join(tooltest.Root(t), "deploy", "helm", "gpureclaim")
}

func render(t *testing.T, helm, set string) []byte {
	t.Helper()
	var files []string
	for _, f := range valueSets[set] {
		files = append(files, filepath.Join(chart(t), f))
	}
	out, err := deploy.Template(helm, chart(t), files...)
	require.NoError(t, err)
	return out
}

// objects decodes the rendered documents the client-go scheme knows; the
// others (prometheus-operator's) come back as maps.
func objects(t *testing.T, out []byte) (typed []runtime.Object, custom []map[string]any) {
	t.Helper()
	for _, d := range deploy.Docs(out) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(d, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			var m map[string]any
			require.NoError(t, yaml.Unmarshal(d, &m))
			custom = append(custom, m)
			continue
		}
		require.NoError(t, err, string(d))
		typed = append(typed, obj)
	}
	return typed, custom
}

func find[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestChartLints(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	for name, files := range valueSets {
		args := []string{"lint", "--strict", chart(t)}
		for _, f := range files {
			args = append(args, "--values", filepath.Join(chart(t), f))
		}
		out, err := deploy.Helm(helm, args...).CombinedOutput()
		require.NoError(t, err, "%s:\n%s", name, out)
		require.Contains(t, string(out), "0 chart(s) failed", name)
	}
}

func TestManifestsAreCurrent(t *testing.T) {
	files, err := deploy.Manifests(tooltest.Bin(t, "helm"), chart(t))
	require.NoError(t, err)
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(tooltest.Root(t), "deploy", "manifests", name))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "deploy/manifests/%s is stale: run make manifests", name)
	}

	b, err := os.ReadFile(filepath.Join(chart(t), "values.yaml"))
	require.NoError(t, err)
	vs, err := deploy.Values(b)
	require.NoError(t, err, "every value needs a \"# --\" comment")
	readme, err := os.ReadFile(filepath.Join(chart(t), "README.md"))
	require.NoError(t, err)
	want, err := deploy.WithValuesTable(readme, vs)
	require.NoError(t, err)
	require.Equal(t, string(want), string(readme), "the chart's README lists other values than values.yaml: run make manifests")
}

func TestValuesWithoutDocsAreRefused(t *testing.T) {
	_, err := deploy.Values([]byte("exporter:\n  # -- documented\n  enabled: true\n  port: 9847\n"))
	require.ErrorContains(t, err, "exporter.port has no")
}

// The chart's copies of the rules and dashboards are those of rules/ and
// dashboards/, byte for byte, and the PrometheusRule carries them whole.
func TestChartCarriesTheGeneratedRulesAndDashboards(t *testing.T) {
	root := tooltest.Root(t)
	rules, err := os.ReadFile(filepath.Join(root, "rules", "gpureclaim.rules.yml"))
	require.NoError(t, err)
	copyOf, err := os.ReadFile(filepath.Join(chart(t), "files", "gpureclaim.rules.yml"))
	require.NoError(t, err)
	require.Equal(t, string(rules), string(copyOf), "the chart's rules are stale: run make rules")

	want, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	got, _ := filepath.Glob(filepath.Join(chart(t), "files", "dashboards", "*.json"))
	require.NotEmpty(t, want)
	require.Len(t, got, len(want), "the chart's dashboards are stale: run make dashboards")
	for _, p := range want {
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(chart(t), "files", "dashboards", filepath.Base(p)))
		require.NoError(t, err)
		require.Equal(t, string(a), string(b), "the chart's %s is stale: run make dashboards", filepath.Base(p))
	}

	typed, custom := objects(t, render(t, tooltest.Bin(t, "helm"), "defaults"))
	var groups any
	for _, m := range custom {
		if m["kind"] == "PrometheusRule" {
			groups = m["spec"]
		}
	}
	var file any
	require.NoError(t, yaml.Unmarshal(rules, &file))
	require.Equal(t, file, groups, "the PrometheusRule's spec is the rules file")

	dashboards := map[string]bool{}
	for _, cm := range find[*corev1.ConfigMap](typed) {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		for k, v := range cm.Data {
			a, err := os.ReadFile(filepath.Join(root, "dashboards", strings.TrimPrefix(k, "gpureclaim-")))
			require.NoError(t, err, k)
			require.JSONEq(t, string(a), v, k)
			dashboards[k] = true
		}
	}
	require.Len(t, dashboards, len(want))
}

// With source: dcgm the chart installs rules, dashboards and the reclaimer
// on the cluster's dcgm-exporter: no exporter, no node dashboard, no kill.
func TestDCGMSource(t *testing.T) {
	root := tooltest.Root(t)
	copyOf, err := os.ReadFile(filepath.Join(chart(t), "files", "gpureclaim-dcgm.rules.yml"))
	require.NoError(t, err)
	dcgmRules, err := os.ReadFile(filepath.Join(root, "rules", "gpureclaim-dcgm.rules.yml"))
	require.NoError(t, err)
	require.Equal(t, string(dcgmRules), string(copyOf), "the chart's dcgm rules are stale: run make rules")

	out := render(t, tooltest.Bin(t, "helm"), "dcgm")
	typed, custom := objects(t, out)
	require.Empty(t, find[*appsv1.DaemonSet](typed), "no exporter")
	for _, m := range custom {
		if m["kind"] == "ServiceMonitor" {
			require.NotContains(t, m["metadata"].(map[string]any)["name"], "exporter", "no exporter to scrape")
		}
		if m["kind"] != "PrometheusRule" {
			continue
		}
		b, err := yaml.Marshal(m["spec"])
		require.NoError(t, err)
		require.Contains(t, string(b), `DCGM_FI_DEV_FB_USED`)
		require.Contains(t, string(b), `job="gpu-operator-dcgm"`, "the configured job")
		require.NotContains(t, string(b), `nvidia-dcgm-exporter`)
	}
	for _, cm := range find[*corev1.ConfigMap](typed) {
		require.NotContains(t, cm.Data, "gpureclaim-node.json", "the node dashboard reads the exporter's own metrics")
		if cfg, ok := cm.Data["reclaimer.yml"]; ok {
			_, err := rconfig.ParseWithoutSecrets([]byte(cfg))
			require.NoError(t, err)
			require.NotContains(t, cfg, "nodes:", "no node agent to ask for a kill, and no token for one")
		}
	}
}

// The exporter gets the privileges its values ask for and no others.
func TestExporterPrivileges(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	for _, tc := range []struct {
		set                  string
		hostPID, root        bool
		caps                 []corev1.Capability
		hostPort, podSockets bool
		token                bool // it lists the node's pods or reads ResourceSlices
	}{
		{set: "defaults", hostPID: true, root: true, caps: []corev1.Capability{"SYS_ADMIN"}, podSockets: true, token: true},
		{set: "all-on", hostPID: true, root: true, caps: []corev1.Capability{"SYS_ADMIN", "KILL"}, hostPort: true, podSockets: true, token: true},
		{set: "minimal"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			typed, _ := objects(t, render(t, helm, tc.set))
			ds := find[*appsv1.DaemonSet](typed)
			require.Len(t, ds, 1)
			spec := ds[0].Spec.Template.Spec
			require.Equal(t, tc.hostPID, spec.HostPID)
			require.False(t, spec.HostNetwork)
			require.NotNil(t, spec.AutomountServiceAccountToken)
			require.Equal(t, tc.token, *spec.AutomountServiceAccountToken, "the exporter calls no API but to list its node's pods or ResourceSlices")
			c := spec.Containers[0]
			sc := c.SecurityContext
			require.False(t, *sc.AllowPrivilegeEscalation)
			require.True(t, *sc.ReadOnlyRootFilesystem)
			require.Nil(t, sc.Privileged)
			require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			require.ElementsMatch(t, tc.caps, sc.Capabilities.Add)
			require.Equal(t, tc.root, *sc.RunAsUser == 0)
			var hostPorts []int32
			for _, p := range c.Ports {
				if p.HostPort != 0 {
					hostPorts = append(hostPorts, p.HostPort)
				}
			}
			require.Equal(t, tc.hostPort, len(hostPorts) > 0)
			for _, m := range c.VolumeMounts {
				require.True(t, m.ReadOnly, "%s is mounted writable", m.Name)
			}
			var socket bool
			for _, v := range spec.Volumes {
				if v.HostPath != nil && v.HostPath.Path == "/var/lib/kubelet/pod-resources" {
					socket = true
				}
			}
			require.Equal(t, tc.podSockets, socket)
		})
	}
}

func TestActionEndpointNeedsProcessAttribution(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	cmd := deploy.Helm(helm, "template", "x", chart(t), "--kube-version", deploy.KubeVersion,
		"--set", "exporter.action.enabled=true", "--set", "exporter.processAttribution.enabled=false")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "exporter.action.enabled needs exporter.processAttribution.enabled")
}

// The reclaimer's namespaced Role is for leases in its own namespace only;
// its ClusterRole is TestChartGrantsTheEnabledWorkloadKinds's.
func TestReclaimerRoleIsLeast(t *testing.T) {
	typed, _ := objects(t, render(t, tooltest.Bin(t, "helm"), "defaults"))
	var reclaimerRoles int
	for _, r := range find[*rbacv1.ClusterRole](typed) {
		if r.Labels["app.kubernetes.io/component"] == "reclaimer" {
			reclaimerRoles++
		}
	}
	require.Equal(t, 1, reclaimerRoles, "one ClusterRole for the reclaimer (the exporter's is TestExporterRoleIsLeast's)")
	nsRoles := find[*rbacv1.Role](typed)
	require.Len(t, nsRoles, 1)
	require.Equal(t, deploy.Namespace, nsRoles[0].Namespace, "leases and state only in the reclaimer's namespace")
	require.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"gpureclaim.io"}, Resources: []string{"gpureclaims"}, Verbs: []string{"get", "list", "create", "delete"}},
		{APIGroups: []string{"gpureclaim.io"}, Resources: []string{"gpureclaims/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "list", "deletecollection"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"gpureclaim-reclaimer-replays"}, Verbs: []string{"get", "update"}},
	}, nsRoles[0].Rules)
}

// The exporter calls no Kubernetes API and mounts no token, unless it
// lists its node's pods or reads its ResourceSlices: then it may list those
// and nothing else.
func TestExporterRoleIsLeast(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	exporterDaemonSet := func(typed []runtime.Object) *appsv1.DaemonSet { return find[*appsv1.DaemonSet](typed)[0] }
	exporterRules := func(typed []runtime.Object) []rbacv1.PolicyRule {
		var rules []rbacv1.PolicyRule
		for _, r := range find[*rbacv1.ClusterRole](typed) {
			if r.Labels["app.kubernetes.io/component"] == "exporter" {
				rules = append(rules, r.Rules...)
			}
		}
		return rules
	}
	pods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}
	slices := rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"list"}}

	typed, _ := objects(t, render(t, helm, "minimal"))
	require.False(t, *exporterDaemonSet(typed).Spec.Template.Spec.AutomountServiceAccountToken)
	require.Empty(t, exporterRules(typed))

	typed, _ = objects(t, render(t, helm, "defaults"))
	ds := exporterDaemonSet(typed)
	require.True(t, *ds.Spec.Template.Spec.AutomountServiceAccountToken)
	require.Contains(t, ds.Spec.Template.Spec.Containers[0].Args, "--kubernetes.node-pods")
	require.NotContains(t, ds.Spec.Template.Spec.Containers[0].Args, "--kubernetes.resource-slices")
	require.Equal(t, []rbacv1.PolicyRule{pods}, exporterRules(typed))

	typed, _ = objects(t, render(t, helm, "all-on"))
	ds = exporterDaemonSet(typed)
	require.True(t, *ds.Spec.Template.Spec.AutomountServiceAccountToken)
	require.Contains(t, ds.Spec.Template.Spec.Containers[0].Args, "--kubernetes.resource-slices")
	require.Equal(t, []rbacv1.PolicyRule{pods, slices}, exporterRules(typed))
}

// By default the reclaimer runs as two replicas that elect a leader and
// keep their state in GPUReclaim resources, on different nodes if they
// can; with storage: bbolt, one replica on a volume, and more is refused.
func TestReclaimerReplicas(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	typed, _ := objects(t, render(t, helm, "defaults"))
	d := find[*appsv1.Deployment](typed)[0]
	require.EqualValues(t, 2, *d.Spec.Replicas)
	args := d.Spec.Template.Spec.Containers[0].Args
	require.Contains(t, args, "--storage.backend=kubernetes")
	require.Contains(t, args, "--leader-elect")
	require.Contains(t, args, "--leader-elect.lease-name=gpureclaim-reclaimer")
	require.NotNil(t, d.Spec.Template.Spec.Affinity.PodAntiAffinity, "replicas spread over nodes")
	require.Empty(t, find[*corev1.PersistentVolumeClaim](typed), "no volume: the state is in the apiserver")
	var env []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env = append(env, e.Name+"="+e.ValueFrom.FieldRef.FieldPath)
	}
	require.Equal(t, []string{"POD_NAME=metadata.name", "POD_NAMESPACE=metadata.namespace"}, env)

	typed, _ = objects(t, render(t, helm, "bbolt"))
	d = find[*appsv1.Deployment](typed)[0]
	require.EqualValues(t, 1, *d.Spec.Replicas)
	require.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type)
	require.NotContains(t, d.Spec.Template.Spec.Containers[0].Args, "--leader-elect")
	require.Len(t, find[*corev1.PersistentVolumeClaim](typed), 1)

	_, err := deploy.Template(helm, chart(t), filepath.Join(chart(t), "ci", "bbolt-values.yaml"), writeValues(t, "reclaimer: {replicas: 2}"))
	require.ErrorContains(t, err, "reclaimer.replicas: a bbolt store has one writer")
}

func writeValues(t *testing.T, yaml string) string {
	p := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(p, []byte(yaml), 0o644))
	return p
}

// The configuration and the flags the chart renders are what the binaries
// accept: the config through the reclaimer's own loader, the flags through
// the binaries' parsers (--version exits after parsing).
func TestChartRendersWhatTheBinariesAccept(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	exporter, reclaimer := binaries(t)
	secrets := t.TempDir()
	for _, f := range []string{"webhook/token", "admin/token", "node/token", "slack/token", "slack/signing-secret", "jupyterhub/token", "read/token"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(secrets, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(secrets, f), []byte("s3cret\n"), 0o600))
	}
	for set := range valueSets {
		t.Run(set, func(t *testing.T) {
			typed, _ := objects(t, render(t, helm, set))
			var cfg string
			for _, cm := range find[*corev1.ConfigMap](typed) {
				if v, ok := cm.Data["reclaimer.yml"]; ok {
					cfg = v
				}
			}
			require.NotEmpty(t, cfg)
			c, err := rconfig.Parse([]byte(strings.ReplaceAll(cfg, "/etc/gpureclaim/secrets", secrets)), t.TempDir())
			require.NoError(t, err, cfg)
			require.Equal(t, "s3cret", c.Webhook.BearerToken)
			require.Empty(t, c.Warnings, "the chart writes no deprecated key")
			if set == "all-on" {
				require.False(t, c.DryRun)
				require.Equal(t, filepath.Join(secrets, "node/token"), c.Nodes.HTTP.Authorization.CredentialsFile)
				require.Equal(t, "s3cret", c.AdminBearerToken)
				u, err := c.Nodes.URL("gpu-node-7")
				require.NoError(t, err)
				require.Equal(t, "http://gpu-node-7:9848", u)
				require.Len(t, c.Notifiers, 1)
				require.Equal(t, "s3cret", c.Notifiers[0].Slack.SigningSecret)
				require.Equal(t, "token", c.Kubernetes.JupyterHub.HTTP.Authorization.Type)
				require.Equal(t, filepath.Join(secrets, "jupyterhub/token"), c.Kubernetes.JupyterHub.HTTP.Authorization.CredentialsFile)
				require.Equal(t, "s3cret", c.Web.Auth.BearerToken)
			} else {
				require.True(t, c.Web.Auth.None, "said outright")
				require.True(t, c.DryRun, "the chart installs in dry run")
			}

			for _, ds := range find[*appsv1.DaemonSet](typed) {
				args := slices.Concat(ds.Spec.Template.Spec.Containers[0].Args, []string{"--version"})
				out, err := exec.Command(exporter, args...).CombinedOutput()
				require.NoError(t, err, "%v: %s", args, out)
			}
			for _, d := range find[*appsv1.Deployment](typed) {
				args := slices.Concat(d.Spec.Template.Spec.Containers[0].Args, []string{"--version"})
				out, err := exec.Command(reclaimer, args...).CombinedOutput()
				require.NoError(t, err, "%v: %s", args, out)
			}
		})
	}
}

// The example Alertmanager configuration passes amtool's check, and each
// copy of an alert goes to one receiver only.
func TestAlertmanagerExampleRoutes(t *testing.T) {
	amtool := tooltest.Bin(t, "amtool")
	file := filepath.Join(tooltest.Root(t), "deploy", "alertmanager", "alertmanager.yml")
	out, err := exec.Command(amtool, "check-config", file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, tc := range []struct {
		labels []string
		want   string
	}{
		{[]string{"alertname=GPUIdle", "audience=reclaimer", "uuid=GPU-1"}, "gpureclaim"},
		{[]string{"alertname=GPUIdle", "audience=people", "uuid=GPU-1"}, "gpu-owners"},
		{[]string{"alertname=MIGInstanceOversized", "audience=reclaimer"}, "gpureclaim"},
		{[]string{"alertname=GPUWasted", "audience=people"}, "gpu-owners"},
		{[]string{"alertname=GPUExporterDown"}, "default"},
	} {
		out, err := exec.Command(amtool, slices.Concat([]string{"config", "routes", "test", "--config.file=" + file}, tc.labels)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, tc.want, strings.TrimSpace(string(out)), "%v", tc.labels)
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	type webhook struct {
		URL          string         `json:"url"`
		SendResolved bool           `json:"send_resolved"`
		MaxAlerts    int            `json:"max_alerts"`
		HTTPConfig   map[string]any `json:"http_config"`
	}
	type receiver struct {
		Name     string    `json:"name"`
		Webhooks []webhook `json:"webhook_configs"`
	}
	var cfg struct {
		Receivers []receiver `json:"receivers"`
	}
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	i := slices.IndexFunc(cfg.Receivers, func(r receiver) bool { return r.Name == "gpureclaim" })
	require.GreaterOrEqual(t, i, 0)
	w := cfg.Receivers[i].Webhooks[0]
	require.True(t, w.SendResolved, "resolved alerts cancel pending reclaims")
	require.Zero(t, w.MaxAlerts)
	require.Contains(t, w.HTTPConfig, "authorization", "the webhook authenticates")
	require.Equal(t, "http://gpureclaim-reclaimer.gpureclaim.svc:9849/webhook", w.URL, "the plain manifests' Service")
}

// The reclaimer's ClusterRole grants exactly what the enabled workload
// kinds need, from the same table the reclaimer's config has built in, and
// the rendered config turns the others off.
func TestChartGrantsTheEnabledWorkloadKinds(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	base := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "list"}},
	}
	kueue := rbacv1.PolicyRule{APIGroups: []string{"kueue.x-k8s.io"}, Resources: []string{"workloads"}, Verbs: []string{"get", "list", "patch"}}
	for _, tc := range []struct {
		set     string
		enabled func(rconfig.Workload) bool
		kueue   bool
	}{
		{"defaults", func(rconfig.Workload) bool { return true }, true},
		{"minimal", func(w rconfig.Workload) bool { return w.Group == "apps" || w.Group == "batch" }, false},
	} {
		t.Run(tc.set, func(t *testing.T) {
			typed, _ := objects(t, render(t, helm, tc.set))
			var role *rbacv1.ClusterRole
			for _, r := range find[*rbacv1.ClusterRole](typed) {
				role = r
			}
			require.NotNil(t, role)
			want := slices.Clone(base)
			for _, w := range rconfig.BuiltinWorkloads() {
				if !tc.enabled(w) {
					continue
				}
				want = append(want, rbacv1.PolicyRule{APIGroups: []string{w.Group}, Resources: []string{w.Resource}, Verbs: []string{"get", "patch"}})
				if w.Scale {
					want = append(want, rbacv1.PolicyRule{APIGroups: []string{w.Group}, Resources: []string{w.Resource + "/scale"}, Verbs: []string{"get", "patch"}})
				}
			}
			if tc.kueue {
				want = append(want, kueue)
			}
			require.ElementsMatch(t, want, role.Rules)

			var cfg string
			for _, cm := range find[*corev1.ConfigMap](typed) {
				if v, ok := cm.Data["reclaimer.yml"]; ok {
					cfg = v
				}
			}
			c, err := rconfig.ParseWithoutSecrets([]byte(cfg))
			require.NoError(t, err)
			for _, w := range rconfig.BuiltinWorkloads() {
				_, on := c.WorkloadFor(w.Group, w.Kind)
				require.Equal(t, tc.enabled(w), on, "%s", w.Name)
			}
			require.Equal(t, tc.kueue, c.Kubernetes.Kueue.On())
		})
	}
}

// The node's check before a kill never calls busy what the rules call idle:
// below the rules' threshold it would refuse the kills they ask for. Every
// shipped configuration: the chart's value sets, the systemd env file, and
// the demo's and end-to-end suite's rules against the exporter's default.
func TestKillCheckIsNeverBelowTheIdleThreshold(t *testing.T) {
	helm := tooltest.Bin(t, "helm")
	ruleThreshold := rules.DefaultConfig().Idle.Threshold
	nodeThreshold := func(args []string) float64 {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--action.idle-threshold="); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				return f
			}
		}
		return names.IdleThreshold // the exporter's default
	}
	for set := range valueSets {
		typed, _ := objects(t, render(t, helm, set))
		for _, ds := range find[*appsv1.DaemonSet](typed) {
			require.GreaterOrEqual(t, nodeThreshold(ds.Spec.Template.Spec.Containers[0].Args), ruleThreshold, "chart %s", set)
		}
	}
	env, err := os.ReadFile(filepath.Join(tooltest.Root(t), "deploy", "systemd", "gpureclaim-exporter.env"))
	require.NoError(t, err)
	node := names.IdleThreshold
	for _, line := range strings.Split(string(env), "\n") {
		if v, ok := strings.CutPrefix(line, "ACTION_IDLE_THRESHOLD="); ok {
			node, err = strconv.ParseFloat(v, 64)
			require.NoError(t, err)
		}
	}
	require.GreaterOrEqual(t, node, ruleThreshold, "systemd")
	demo, err := rules.Load(filepath.Join(tooltest.Root(t), "rules", "demo.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, names.IdleThreshold, demo.Idle.Threshold, "the demo and the e2e suite run the exporter with its default")
}
