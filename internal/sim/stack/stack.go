// Package stack runs the whole system on loopback: simulated GPU nodes
// (the exporter), Prometheus with the rules, Alertmanager routed to the
// reclaimer, the reclaimer, and optionally a real Kubernetes control plane
// whose fake nodes hold the simulated nodes' pods. `make run` and the
// end-to-end tests start it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpureclaim/gpureclaim/internal/names"
	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

// Node is a simulated GPU node.
type Node struct {
	Name     string // the scenario's node name
	Scenario string // a scenario file or a built-in name, read when it is needed
	Addr     string // its exporter, once started
}

func (n *Node) scenario() (*nvmlsim.Scenario, error) {
	sc, err := nvmlsim.Open(n.Scenario)
	if err != nil {
		return nil, err
	}
	if n.Name == "" {
		n.Name = sc.Node
	}
	return sc, nil
}

// Options say what to run.
type Options struct {
	Bin   string // gpureclaim-exporter-sim, gpureclaim-reclaimer, prometheus, alertmanager, etcd, kube-*, kwok, kwok-stages.yaml
	Dir   string // where configs, state and logs go
	Nodes []*Node
	// Speed runs the scenarios this many times faster than the wall clock.
	Speed float64
	// Rules is the rule file Prometheus evaluates (rendered from
	// rules/demo.yaml, on a compressed clock); its exporter job is
	// names.ExporterJob.
	Rules []byte
	// Kubernetes runs a control plane; the scenarios' pods become real pods.
	Kubernetes bool
	// IdleWindow is the exporters' own idle re-check window.
	IdleWindow time.Duration
	// ReclaimerRole is the reclaimer's ClusterRole as the chart renders it
	// (deploy.ReclaimerClusterRole): the reclaimer is bound to it.
	ReclaimerRole []byte
	// ExporterArgs and ExporterEnv are added to every exporter's flags and
	// environment (a Slurm cluster's --slurm.enabled and SLURM_CONF).
	ExporterArgs, ExporterEnv []string
	// DCGM makes the exporters serve dcgm-exporter's exposition, with no
	// node action endpoint: the rules must be rendered for source: dcgm.
	DCGM bool
	// Cluster names the cluster in a fleet: Prometheus labels what it
	// scrapes with it (external_labels), under names.LabelCluster.
	Cluster string
	// RemoteWrite is the fleet's engine that Prometheus sends every series
	// to. With no Rules, Prometheus evaluates nothing: the engine's ruler
	// does.
	RemoteWrite string
	// Log gets one line per component started.
	Log io.Writer
}

// Stack is the running system.
type Stack struct {
	o       Options
	Cluster *cluster.Cluster
	Admin   kubernetes.Interface

	PrometheusURL, AlertmanagerURL, ReclaimerURL string
	reclaimerAddr                                string
	procs                                        []*exec.Cmd
}

// Tokens the components share.
const (
	WebhookToken = "webhook-token"
	NodeToken    = "node-token"
	AdminToken   = "admin-token"
)

// New prepares a stack; nothing runs yet.
func New(o Options) (*Stack, error) {
	if o.Log == nil {
		o.Log = io.Discard
	}
	for name, v := range map[string]string{"webhook.token": WebhookToken, "node.token": NodeToken, "admin.token": AdminToken} {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(v+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	for _, n := range o.Nodes {
		if _, err := n.scenario(); err != nil {
			return nil, err
		}
	}
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Stack{o: o, reclaimerAddr: fmt.Sprintf("127.0.0.1:%d", port)}
	s.ReclaimerURL = "http://" + s.reclaimerAddr
	return s, nil
}

// Stop stops everything, newest first.
func (s *Stack) Stop() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		cluster.Stop(s.procs[i], 10*time.Second)
	}
	s.procs = nil
	if s.Cluster != nil {
		s.Cluster.Stop()
	}
}

func (s *Stack) start(name string, args ...string) error { return s.startEnv(name, nil, args...) }

func (s *Stack) startEnv(name string, env []string, args ...string) error {
	log, err := os.Create(filepath.Join(s.o.Dir, name+".log"))
	if err != nil {
		return err
	}
	bin := args[0]
	if !strings.Contains(bin, "/") {
		bin = filepath.Join(s.o.Bin, bin)
	}
	cmd := exec.Command(bin, args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Own process group: a Ctrl-C at the terminal reaches the demo, which stops everything in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	s.procs = append(s.procs, cmd)
	return nil
}

// Log returns a component's log.
func (s *Stack) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.o.Dir, name+".log"))
	return string(b)
}

func waitHTTP(ctx context.Context, what, url string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return errors.New(what + " did not come up in 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StartKubernetes runs the control plane, gives the reclaimer its role, and
// registers the simulated nodes as kwok nodes with their GPUs.
func (s *Stack) StartKubernetes(ctx context.Context) error {
	dir := filepath.Join(s.o.Dir, "kubernetes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c, err := cluster.Start(cluster.Options{Bin: s.o.Bin, Dir: dir, Full: true, Stages: filepath.Join(s.o.Bin, "kwok-stages.yaml")})
	if err != nil {
		return err
	}
	s.Cluster = c
	if s.Admin, err = c.Client(cluster.AdminToken); err != nil {
		return err
	}
	fmt.Fprintf(s.o.Log, "kube-apiserver  %s (etcd, controller manager, scheduler, kwok)\n", c.URL)
	if err := s.applyRole(ctx); err != nil {
		return err
	}
	for _, n := range s.o.Nodes {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.Name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"kubernetes.io/hostname": n.Name, "nvidia.com/gpu.present": "true"}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("110")},
				Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8"), corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("110")},
			},
		}
		if _, err := s.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func (s *Stack) applyRole(ctx context.Context) error {
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(s.o.ReclaimerRole, &role); err != nil {
		return err
	}
	if _, err := s.Admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := s.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: cluster.ReclaimerUser}},
	}, metav1.CreateOptions{})
	return err
}

// PodSpec is the pod a scenario's pod becomes: pinned to its node, asking
// for its GPUs, tolerating the fake node.
func PodSpec(node string, gpus int) corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:    node,
		Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "main", Image: "registry.example.com/gpu-workload:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(fmt.Sprint(gpus))}}}},
	}
}

// CreatePods makes every scenario pod that does not exist yet a real pod on
// its node (namespaces too), with the scenario's labels and annotations.
func (s *Stack) CreatePods(ctx context.Context) error {
	for _, n := range s.o.Nodes {
		sc, err := n.scenario()
		if err != nil {
			return err
		}
		units := map[string]int{}
		for _, g := range sc.GPUs {
			for _, p := range g.Pods {
				units[p]++
			}
			for _, m := range g.MIG {
				for _, p := range m.Pods {
					units[p]++
				}
			}
		}
		for _, p := range sc.Pods {
			if _, err := s.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			if _, err := s.Admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err == nil {
				continue
			}
			spec := PodSpec(n.Name, max(1, units[p.Name]))
			spec.Containers[0].Name = p.Container
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Annotations: p.Annotations}, Spec: spec}
			if _, err := s.Admin.CoreV1().Pods(p.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}
	}
	return nil
}

// StartExporters runs one exporter per node, with its action endpoint.
func (s *Stack) StartExporters(ctx context.Context) error {
	var kubeconfig string
	if s.Cluster != nil {
		kubeconfig = s.Cluster.Kubeconfig
	}
	window := s.o.IdleWindow
	if window == 0 {
		window = 5 * time.Second
	}
	for _, n := range s.o.Nodes {
		port, err := cluster.FreePort()
		if err != nil {
			return err
		}
		n.Addr = fmt.Sprintf("127.0.0.1:%d", port)
		args := []string{"gpureclaim-exporter-sim", "--simulate=" + n.Scenario, "--node-name=" + n.Name, fmt.Sprintf("--simulate.speed=%g", s.o.Speed),
			"--simulate.dir=" + filepath.Join(s.o.Dir, "node-"+n.Name), "--sample.interval=1s", "--web.listen-address=" + n.Addr}
		if s.o.DCGM {
			args = append(args, "--simulate.exposition=dcgm")
		} else {
			args = append(args, "--action.token-file="+filepath.Join(s.o.Dir, "node.token"), "--action.idle-window="+window.String(), "--action.kill-grace=1s")
		}
		if kubeconfig != "" {
			// Attributed as the node binary is, from the cluster's pod list
			// (the simulated pods take the cluster's UIDs), not from the
			// scenario's pod metadata, which a node does not have.
			args = append(args, "--simulate.kubeconfig="+kubeconfig,
				"--kubernetes.node-pods", "--kubernetes.node-pods-interval=5s", "--kubernetes.kubeconfig="+kubeconfig)
		}
		args = append(args, s.o.ExporterArgs...)
		if err := os.MkdirAll(filepath.Join(s.o.Dir, "node-"+n.Name), 0o755); err != nil {
			return err
		}
		if err := s.startEnv("exporter-"+n.Name, s.o.ExporterEnv, args...); err != nil {
			return err
		}
		if err := waitHTTP(ctx, "the exporter of "+n.Name, "http://"+n.Addr+"/metrics"); err != nil {
			return err
		}
		fmt.Fprintf(s.o.Log, "exporter        http://%s/metrics  (%s, %d GPUs simulated at %gx)\n", n.Addr, n.Name, 8, s.o.Speed)
	}
	return nil
}

// StartAlertmanager routes the reclaimer's copy of each alert to its webhook.
func (s *Stack) StartAlertmanager(ctx context.Context) error {
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.AlertmanagerURL = "http://" + addr
	cfg := fmt.Sprintf(`route:
  receiver: people
  group_by: [alertname, uuid]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1m
  routes:
    - matchers: ['audience="reclaimer"']
      receiver: gpureclaim
      group_by: [alertname, uuid, namespace, pod, user]
      group_wait: 0s
      group_interval: 1s
      repeat_interval: 1m
receivers:
  - name: people
  - name: gpureclaim
    webhook_configs:
      - url: %s/webhook
        send_resolved: true
        http_config:
          authorization: {credentials_file: %s}
`, s.ReclaimerURL, filepath.Join(s.o.Dir, "webhook.token"))
	path := filepath.Join(s.o.Dir, "alertmanager.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	if err := s.start("alertmanager", "alertmanager", "--config.file="+path, "--storage.path="+filepath.Join(s.o.Dir, "alertmanager"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=info"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "alertmanager", s.AlertmanagerURL+"/-/ready"); err != nil {
		return err
	}
	fmt.Fprintf(s.o.Log, "alertmanager    %s\n", s.AlertmanagerURL)
	return nil
}

// StartReclaimer runs the reclaimer with the stack's wiring and extra, the
// YAML of its notifiers and policies.
func (s *Stack) StartReclaimer(ctx context.Context, extra string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook: {bearer_token_file: webhook.token}\nweb: {auth: {none: true}}\nalertmanager: {url: %q}\nstatus_page_url: %q\nadmin_bearer_token_file: admin.token\n", s.AlertmanagerURL, s.ReclaimerURL)
	if !s.o.DCGM { // dcgm-exporter has no action endpoint
		b.WriteString("nodes:\n  authorization: {credentials_file: node.token}\n  timeout: 30s\n  kill_grace: 1s\n  addresses:\n")
		for _, n := range s.o.Nodes {
			fmt.Fprintf(&b, "    %s: \"http://%s\"\n", n.Name, n.Addr)
		}
	}
	if s.Cluster != nil {
		kc, err := s.Cluster.KubeconfigFor(cluster.ReclaimerToken)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "kubernetes: {kubeconfig: %q, eviction_deadline: 1m}\n", kc)
	} else {
		b.WriteString("kubernetes: {enabled: false}\n")
	}
	b.WriteString(extra)
	path := filepath.Join(s.o.Dir, "reclaimer.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return err
	}
	if err := s.start("reclaimer", "gpureclaim-reclaimer", "--config.file="+path, "--storage.path="+filepath.Join(s.o.Dir, "reclaimer.db"),
		"--web.listen-address="+s.reclaimerAddr, "--step.interval=200ms"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "the reclaimer", s.ReclaimerURL+"/readyz"); err != nil {
		return fmt.Errorf("%w\n%s", err, s.Log("reclaimer"))
	}
	fmt.Fprintf(s.o.Log, "reclaimer       %s/  (status page)\n", s.ReclaimerURL)
	return nil
}

// StartPrometheus scrapes the exporters and the reclaimer every second and
// evaluates the rules rendered from the rules config every second.
func (s *Stack) StartPrometheus(ctx context.Context) error {
	var targets []string
	for _, n := range s.o.Nodes {
		targets = append(targets, fmt.Sprintf("%q", n.Addr))
	}
	var b strings.Builder
	b.WriteString("global: {scrape_interval: 1s, evaluation_interval: 1s")
	if s.o.Cluster != "" {
		fmt.Fprintf(&b, ", external_labels: {%s: %q}", names.LabelCluster, s.o.Cluster)
	}
	b.WriteString("}\n")
	if len(s.o.Rules) > 0 {
		rulesPath := filepath.Join(s.o.Dir, "gpureclaim.rules.yml")
		if err := os.WriteFile(rulesPath, s.o.Rules, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(&b, "rule_files: [%q]\nalerting:\n  alertmanagers: [{static_configs: [{targets: [%q]}]}]\n", rulesPath, strings.TrimPrefix(s.AlertmanagerURL, "http://"))
	}
	if s.o.RemoteWrite != "" {
		// Sent within a moment, for a ruler that reads windows of seconds.
		fmt.Fprintf(&b, "remote_write: [{url: %q, queue_config: {batch_send_deadline: 100ms, min_backoff: 50ms, max_backoff: 1s}}]\n", s.o.RemoteWrite)
	}
	fmt.Fprintf(&b, `scrape_configs:
  - job_name: %s
    honor_labels: true
    static_configs: [{targets: [%s]}]
  - job_name: gpureclaim-reclaimer
    static_configs: [{targets: [%q]}]
`, names.ExporterJob, strings.Join(targets, ", "), s.reclaimerAddr)
	cfg := b.String()
	path := filepath.Join(s.o.Dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s.PrometheusURL = "http://" + addr
	if err := s.start("prometheus", "prometheus", "--config.file="+path, "--storage.tsdb.path="+filepath.Join(s.o.Dir, "prometheus"),
		"--web.listen-address="+addr, "--log.level=warn"); err != nil {
		return err
	}
	if err := waitHTTP(ctx, "prometheus", s.PrometheusURL+"/-/ready"); err != nil {
		return err
	}
	fmt.Fprintf(s.o.Log, "prometheus      %s\n", s.PrometheusURL)
	return nil
}
