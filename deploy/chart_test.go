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
	require.Len(t, find[*rbacv1.ClusterRole](typed), 1)
	nsRoles := find[*rbacv1.Role](typed)
	require.Len(t, nsRoles, 1)
	require.Equal(t, deploy.Namespace, nsRoles[0].Namespace, "leases and state only in the reclaimer's namespace")
	require.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		{APIGroups: []string{"gpureclaim.io"}, Resources: []string{"gpureclaims"}, Verbs: []string{"get", "list", "create", "update", "delete"}},
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
