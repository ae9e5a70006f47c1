// Package kubetest runs a real kube-apiserver on etcd for the tests, from
// the binaries `make tools` builds (see internal/sim/cluster).
package kubetest

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gpureclaim/gpureclaim/internal/sim/cluster"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// Tokens of the two users.
const (
	AdminToken     = cluster.AdminToken
	ReclaimerToken = cluster.ReclaimerToken
	ReclaimerUser  = cluster.ReclaimerUser
)

// Cluster is a running control plane for one test.
type Cluster struct {
	*cluster.Cluster
	t testing.TB
}

// Start runs etcd and kube-apiserver; with full, also the controller
// manager, the scheduler and kwok.
func Start(t testing.TB, full bool) *Cluster { return StartWith(t, cluster.Options{Full: full}) }

// StartWith runs a control plane with options (Bin, Dir and Stages are
// filled in).
func StartWith(t testing.TB, o cluster.Options) *Cluster {
	t.Helper()
	full := o.Full
	bins := []string{"etcd", "kube-apiserver"}
	if full {
		bins = append(bins, "kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages.yaml")
	}
	var dir string
	for _, b := range bins {
		dir = filepath.Dir(tooltest.Bin(t, b))
	}
	o.Bin, o.Dir, o.Stages = dir, t.TempDir(), filepath.Join(dir, "kwok-stages.yaml")
	c, err := cluster.Start(o)
	t.Cleanup(c.Stop)
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{Cluster: c, t: t}
}

// Client returns a clientset that authenticates with token.
func (c *Cluster) Client(t testing.TB, token string) kubernetes.Interface {
	cs, err := c.Cluster.Client(token)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// RESTConfig returns a client config that authenticates with token.
func (c *Cluster) RESTConfig(token string) *rest.Config { return c.Cluster.RESTConfig(token) }

// BindReclaimerRole creates the reclaimer's ClusterRole from its YAML
// (deploy.ReclaimerClusterRole) and binds it to the reclaimer's user.
func (c *Cluster) BindReclaimerRole(t testing.TB, roleYAML []byte) {
	t.Helper()
	admin := c.Client(t, AdminToken)
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(roleYAML, &role); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: ReclaimerUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// BindReclaimerNamespaceRole creates the reclaimer's Role (its YAML names
// its namespace, created here) and binds it to the reclaimer's user.
func (c *Cluster) BindReclaimerNamespaceRole(t testing.TB, roleYAML []byte) {
	t.Helper()
	admin := c.Client(t, AdminToken)
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(roleYAML, &role); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: role.Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(role.Namespace).Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(role.Namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: ReclaimerUser}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer learns of a new binding a moment later.
	deadline := time.Now().Add(30 * time.Second)
	for _, r := range role.Rules {
		name := ""
		if len(r.ResourceNames) > 0 {
			name = r.ResourceNames[0]
		}
		for {
			rev, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: ReclaimerUser, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: role.Namespace, Group: r.APIGroups[0], Resource: r.Resources[0], Verb: r.Verbs[0], Name: name},
			}}, metav1.CreateOptions{})
			if err == nil && rev.Status.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the reclaimer may not %s %s after 30s: %v", r.Verbs[0], r.Resources[0], err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Apply applies manifests with kubectl, as the admin.
func (c *Cluster) Apply(t testing.TB, manifests []byte) {
	t.Helper()
	apply := exec.Command(tooltest.Bin(t, "kubectl"), "--kubeconfig", c.Kubeconfig, "apply", "-f", "-")
	apply.Stdin = bytes.NewReader(manifests)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v: %s", err, out)
	}
}

// InstallCRDs applies CustomResourceDefinitions (files or folders) with
// server-side apply, which takes CRDs too large for a client-side apply's
// annotation, and waits until every one is established.
func (c *Cluster) InstallCRDs(t testing.TB, paths ...string) {
	t.Helper()
	kubectl := tooltest.Bin(t, "kubectl")
	for _, p := range paths {
		out, err := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--server-side", "-f", p).CombinedOutput()
		if err != nil {
			t.Fatalf("installing the CRDs in %s: %v\n%s", p, err, out)
		}
	}
	// kubectl wait fails, rather than waits, on a CRD whose status has no
	// conditions yet: poll until none is left unestablished.
	established := `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Established")].status}{"\n"}{end}`
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig, "get", "crd", "-o", established).Output()
		if err == nil && !strings.Contains(string(out), "=\n") && !strings.Contains(string(out), "=False") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRDs not established after a minute:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
