// Package cluster runs a real Kubernetes control plane on loopback from
// the binaries `make tools` builds: etcd and kube-apiserver (token auth:
// admintoken is cluster-admin, reclaimertoken has what RBAC grants it) and,
// when asked, kube-controller-manager, kube-scheduler and kwok, whose fake
// nodes run pods.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Tokens of the two users.
const (
	AdminToken     = "admintoken"
	ReclaimerToken = "reclaimertoken"
	ReclaimerUser  = "reclaimer"
)

// Options say what to run.
type Options struct {
	Bin string // folder with etcd, kube-apiserver, ...
	Dir string // work folder, empty before Start
	// Full adds the controller manager, the scheduler and kwok.
	Full bool
	// Stages is kwok's stage config (bin/kwok-stages.yaml).
	Stages string
	// Audit writes the apiserver's audit log of every write to AuditLog.
	Audit bool
}

// AuditLog is the audit log's file in the cluster's folder, with Audit.
const AuditLog = "audit.log"

// auditPolicy records who wrote what and how it was answered: every
// create, update, patch and delete, at Metadata level.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
`

// Cluster is a running control plane.
type Cluster struct {
	Dir        string
	URL        string
	Kubeconfig string
	procs      []*proc
	// How kube-apiserver was started, to start it again after an outage.
	apiserverBin  string
	apiserverArgs []string
	apiserver     *proc
	restarts      int
}

// proc is a process of the control plane and how to tell it has ended.
type proc struct {
	cmd  *exec.Cmd
	log  string        // its log file
	done chan struct{} // closed once it has exited
}

func (p *proc) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// errPortTaken says a process could not listen on a port picked free a
// moment before: another program on the machine took it in between.
var errPortTaken = errors.New("a port picked free was taken before the process listened on it")

// FreePort returns a loopback port nobody listens on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs the control plane; Stop stops it, also on error. Ports are
// picked free at start; when another program takes one first, Start tries
// again on new ones.
func Start(o Options) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := start(o)
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return c, err
		}
		if err := os.RemoveAll(filepath.Join(o.Dir, "etcd")); err != nil {
			return c, err
		}
	}
}

func start(o Options) (c *Cluster, err error) {
	c = &Cluster{Dir: o.Dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return c, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return c, err
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(AdminToken + ",admin,admin-uid,system:masters\n" + ReclaimerToken + "," + ReclaimerUser + ",reclaimer-uid\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, name), b, 0o600); err != nil {
			return c, err
		}
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort(); err != nil {
			return c, err
		}
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcd, err := c.start(filepath.Join(o.Bin, "etcd"), "etcd", "--data-dir="+filepath.Join(o.Dir, "etcd"), "--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", ports[1]), fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", ports[1]),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", ports[1]), "--unsafe-no-fsync", "--log-level=warn")
	if err != nil {
		return c, err
	}
	if err := wait("etcd", etcd, func() bool { return get(http.DefaultClient, etcdURL+"/health", "") }); err != nil {
		return c, err
	}
	args := []string{"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ports[2]), "--cert-dir=" + filepath.Join(o.Dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(o.Dir, "sa.pub"), "--service-account-signing-key-file=" + filepath.Join(o.Dir, "sa.key"),
		"--token-auth-file=" + filepath.Join(o.Dir, "tokens.csv"), "--authorization-mode=RBAC", "--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none"}
	if !o.Full {
		// Without the controller manager no default ServiceAccount exists.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	if o.Audit {
		policy := filepath.Join(o.Dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
			return c, err
		}
		args = append(args, "--audit-policy-file="+policy, "--audit-log-path="+filepath.Join(o.Dir, AuditLog), "--audit-log-mode=blocking")
	}
	c.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	c.apiserverBin, c.apiserverArgs = filepath.Join(o.Bin, "kube-apiserver"), args
	if err := c.StartAPIServer(); err != nil {
		return c, err
	}
	c.Kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, []byte(c.kubeconfig(AdminToken)), 0o600); err != nil {
		return c, err
	}
	if o.Full {
		if err := c.startControllers(o); err != nil {
			return c, err
		}
	}
	return c, nil
}

// StartAPIServer starts kube-apiserver, on the same address and etcd as
// before an outage, and waits until it is ready.
func (c *Cluster) StartAPIServer() error {
	name := "kube-apiserver"
	if c.restarts > 0 {
		name = fmt.Sprintf("kube-apiserver-%d", c.restarts)
	}
	c.restarts++
	p, err := c.start(c.apiserverBin, name, c.apiserverArgs...)
	if err != nil {
		return err
	}
	c.apiserver = p
	return wait("kube-apiserver", p, func() bool { return get(c.ours(), c.URL+"/readyz", AdminToken) })
}

// ours is a client that trusts only the serving certificate this
// apiserver wrote to its cert dir, so that another test's apiserver on a
// reused port never passes for it.
func (c *Cluster) ours() *http.Client {
	pool := x509.NewCertPool()
	b, err := os.ReadFile(filepath.Join(c.Dir, "certs", "apiserver.crt"))
	if err != nil || !pool.AppendCertsFromPEM(b) {
		pool = x509.NewCertPool() // not written yet: trust nothing
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}, DisableKeepAlives: true}}
}

// StopAPIServer stops kube-apiserver, as in an outage; etcd and the
// controllers keep running.
func (c *Cluster) StopAPIServer() {
	if c.apiserver == nil {
		return
	}
	c.apiserver.stop(10 * time.Second)
	c.procs = slices.DeleteFunc(c.procs, func(p *proc) bool { return p == c.apiserver })
	c.apiserver = nil
}

func get(hc *http.Client, url, token string) bool {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (c *Cluster) kubeconfig(token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: user, user: {token: %s}}]
contexts: [{name: local, context: {cluster: local, user: user}}]
current-context: local
`, c.URL, token)
}

// KubeconfigFor writes a kubeconfig that authenticates with token.
func (c *Cluster) KubeconfigFor(token string) (string, error) {
	p := filepath.Join(c.Dir, "kubeconfig-"+token)
	return p, os.WriteFile(p, []byte(c.kubeconfig(token)), 0o600)
}

// Client returns a clientset that authenticates with token.
func (c *Cluster) Client(token string) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.RESTConfig(token))
}

// RESTConfig is a client config that authenticates with token.
func (c *Cluster) RESTConfig(token string) *rest.Config {
	return &rest.Config{Host: c.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
}

func (c *Cluster) startControllers(o Options) error {
	cm, err := c.start(filepath.Join(o.Bin, "kube-controller-manager"), "kube-controller-manager", "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file="+filepath.Join(o.Dir, "sa.key"), "--controllers=*", "--use-service-account-credentials=false")
	if err != nil {
		return err
	}
	if _, err := c.start(filepath.Join(o.Bin, "kube-scheduler"), "kube-scheduler", "--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--secure-port=0"); err != nil {
		return err
	}
	port, err := FreePort()
	if err != nil {
		return err
	}
	if _, err := c.start(filepath.Join(o.Bin, "kwok"), "kwok", "--kubeconfig="+c.Kubeconfig, "--config="+o.Stages, "--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-ip=10.0.0.1", fmt.Sprintf("--server-address=127.0.0.1:%d", port)); err != nil {
		return err
	}
	cs, err := c.Client(AdminToken)
	if err != nil {
		return err
	}
	return wait("the default ServiceAccount", cm, func() bool {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil
	})
}

func (c *Cluster) start(bin, name string, args ...string) (*proc, error) {
	path := filepath.Join(c.Dir, name+".log")
	log, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{cmd: cmd, log: path, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return p, nil
}

// Stop ends every process, newest first.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop(10 * time.Second)
	}
	c.procs = nil
}

// Stop sends SIGTERM, waits, then SIGKILL.
func Stop(p *exec.Cmd, grace time.Duration) {
	if p.Process == nil {
		return
	}
	_ = p.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Process.Kill()
		<-done
	}
}

// CPU returns the CPU time the threads of the running control-plane
// processes have spent so far, and how long they have waited for a CPU
// (/proc/<pid>/task/*/schedstat): what a benchmark on the same machine
// leaves the apiserver and etcd.
func (c *Cluster) CPU() (ran, waited time.Duration, err error) {
	for _, p := range c.procs {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.cmd.Process.Pid))
		if err != nil {
			return 0, 0, err
		}
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue // the thread ended
			}
			var onCPU, onQueue int64
			if _, err := fmt.Sscan(string(b), &onCPU, &onQueue); err != nil {
				return 0, 0, fmt.Errorf("%s: %w", f, err)
			}
			ran += time.Duration(onCPU)
			waited += time.Duration(onQueue)
		}
	}
	return ran, waited, nil
}

// Log returns a component's log.
func (c *Cluster) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	return string(b)
}

// wait waits until ok, while p runs; the error ends with p's last log
// lines.
func wait(what string, p *proc, ok func() bool) error {
	deadline := time.Now().Add(90 * time.Second)
	for !ok() {
		select {
		case <-p.done:
			log := logTail(p.log)
			if strings.Contains(log, "address already in use") {
				return fmt.Errorf("%s exited: %w:\n%s", what, errPortTaken, log)
			}
			return fmt.Errorf("%s exited (%v) before it was ready:\n%s", what, p.cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready in 90s:\n%s", what, logTail(p.log))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// logTail is the end of a log, enough to say why a process failed.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const keep = 4 << 10
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}
