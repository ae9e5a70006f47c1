package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpureclaim/gpureclaim/internal/sim/nvmlsim"
)

// podWatch keeps a simulated node's pods in step with a cluster: a pod that
// was there and is gone, or terminating, is gone from the simulated node
// too; under allocation: dra, the devices the scheduler allocated to the
// node's running pods' ResourceClaims are theirs. It lists the node's pods with one plain API call per sample rather
// than a Kubernetes client library, which would weigh more than the
// exporter it serves.
type podWatch struct {
	api  *apiClient
	sim  *nvmlsim.Sim
	node string
	log  *slog.Logger
	seen map[string]bool
}

func newPodWatch(kubeconfig string, sim *nvmlsim.Sim, node string, log *slog.Logger) (*podWatch, error) {
	api, err := loadKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return &podWatch{api: api, sim: sim, node: node, log: log, seen: map[string]bool{}}, nil
}

func (w *podWatch) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		w.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *podWatch) sync(ctx context.Context) {
	pods, err := w.api.nodePods(ctx, w.node)
	if err != nil {
		w.log.Warn("listing the simulated node's pods", "err", err)
		return
	}
	running := map[string]bool{}
	for _, p := range pods {
		if p.Metadata.DeletionTimestamp == nil {
			running[p.Metadata.Namespace+"/"+p.Metadata.Name] = true
		}
	}
	if w.sim.Scenario().Allocation == nvmlsim.AllocationDRA {
		w.sim.SetClusterClaims(w.claims(ctx, pods))
	}
	for _, p := range w.sim.Scenario().Pods {
		switch {
		case running[p.Namespace+"/"+p.Name]:
			w.seen[p.Name] = true
		case w.seen[p.Name]:
			if w.sim.RemovePod(p.Name) {
				w.log.Info("pod left the cluster: its GPUs are free", "pod", p.Namespace+"/"+p.Name)
			}
		}
	}
}

// apiClient calls the API server a kubeconfig's current context names.
type apiClient struct {
	server, token string
	http          *http.Client
}

// kubeconfig holds the fields of a kubeconfig the pod watch uses.
type kubeconfig struct {
	CurrentContext string `yaml:"current-context"`
	Clusters       []struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Server                   string `yaml:"server"`
			InsecureSkipTLSVerify    bool   `yaml:"insecure-skip-tls-verify"`
			CertificateAuthorityData string `yaml:"certificate-authority-data"`
		} `yaml:"cluster"`
	} `yaml:"clusters"`
	Users []struct {
		Name string `yaml:"name"`
		User struct {
			Token string `yaml:"token"`
		} `yaml:"user"`
	} `yaml:"users"`
	Contexts []struct {
		Name    string `yaml:"name"`
		Context struct {
			Cluster string `yaml:"cluster"`
			User    string `yaml:"user"`
		} `yaml:"context"`
	} `yaml:"contexts"`
}

// loadKubeconfig reads a kubeconfig with a bearer token (what the demo and
// the tests write).
func loadKubeconfig(path string) (*apiClient, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var clusterName, userName string
	for _, c := range kc.Contexts {
		if c.Name == kc.CurrentContext {
			clusterName, userName = c.Context.Cluster, c.Context.User
		}
	}
	c := &apiClient{}
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	for _, cl := range kc.Clusters {
		if cl.Name != clusterName {
			continue
		}
		c.server = cl.Cluster.Server
		tlsCfg.InsecureSkipVerify = cl.Cluster.InsecureSkipTLSVerify //nolint:gosec // as the kubeconfig says
		if cl.Cluster.CertificateAuthorityData != "" {
			pem, err := base64.StdEncoding.DecodeString(cl.Cluster.CertificateAuthorityData)
			if err != nil {
				return nil, fmt.Errorf("%s: certificate-authority-data: %w", path, err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(pem)
			tlsCfg.RootCAs = pool
		}
	}
	for _, u := range kc.Users {
		if u.Name == userName {
			c.token = u.User.Token
		}
	}
	if c.server == "" || c.token == "" {
		return nil, fmt.Errorf("%s: the current context needs a cluster server and a user token", path)
	}
	c.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return c, nil
}

// apiPod holds the fields of a pod the pod watch reads.
type apiPod struct {
	Metadata struct {
		Name              string  `json:"name"`
		Namespace         string  `json:"namespace"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name      string `json:"name"`
			Resources struct {
				Claims []struct {
					Name string `json:"name"`
				} `json:"claims"`
			} `json:"resources"`
		} `json:"containers"`
		ResourceClaims []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaims"`
	} `json:"spec"`
	Status struct {
		Phase                 string `json:"phase"`
		ResourceClaimStatuses []struct {
			Name              string `json:"name"`
			ResourceClaimName string `json:"resourceClaimName"`
		} `json:"resourceClaimStatuses"`
	} `json:"status"`
}

// claims are the DRA allocations of the node's running pods, as the
// scheduler wrote them into their ResourceClaims: what the kubelet would
// report once the DRA driver prepared them.
func (w *podWatch) claims(ctx context.Context, pods []apiPod) []nvmlsim.ClusterClaim {
	var out []nvmlsim.ClusterClaim
	for _, p := range pods {
		if p.Status.Phase != "Running" || p.Metadata.DeletionTimestamp != nil {
			continue
		}
		for _, rc := range p.Spec.ResourceClaims {
			name := rc.ResourceClaimName
			for _, st := range p.Status.ResourceClaimStatuses {
				if name == "" && st.Name == rc.Name {
					name = st.ResourceClaimName
				}
			}
			if name == "" {
				continue
			}
			devices, err := w.api.allocation(ctx, p.Metadata.Namespace, name)
			if err != nil {
				w.log.Warn("reading a pod's ResourceClaim", "pod", p.Metadata.Namespace+"/"+p.Metadata.Name, "claim", name, "err", err)
				continue
			}
			for _, c := range p.Spec.Containers {
				for _, used := range c.Resources.Claims {
					if used.Name == rc.Name && len(devices) > 0 {
						out = append(out, nvmlsim.ClusterClaim{Namespace: p.Metadata.Namespace, Pod: p.Metadata.Name, Container: c.Name,
							ClaimNamespace: p.Metadata.Namespace, ClaimName: name, Devices: devices})
					}
				}
			}
		}
	}
	return out
}

func (c *apiClient) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// nodePods lists the node's pods.
func (c *apiClient) nodePods(ctx context.Context, node string) ([]apiPod, error) {
	var list struct {
		Items []apiPod `json:"items"`
	}
	if err := c.get(ctx, "/api/v1/pods?fieldSelector="+url.QueryEscape("spec.nodeName="+node), &list); err != nil {
		return nil, err
	}
	if list.Items == nil {
		return nil, errors.New("listing pods: no item list in the answer")
	}
	return list.Items, nil
}

// allocation reads the devices allocated to a ResourceClaim.
func (c *apiClient) allocation(ctx context.Context, ns, name string) ([]nvmlsim.ClaimDevice, error) {
	var claim struct {
		Status struct {
			Allocation *struct {
				Devices struct {
					Results []struct {
						Driver string `json:"driver"`
						Pool   string `json:"pool"`
						Device string `json:"device"`
					} `json:"results"`
				} `json:"devices"`
			} `json:"allocation"`
		} `json:"status"`
	}
	if err := c.get(ctx, "/apis/resource.k8s.io/v1/namespaces/"+url.PathEscape(ns)+"/resourceclaims/"+url.PathEscape(name), &claim); err != nil {
		return nil, err
	}
	if claim.Status.Allocation == nil {
		return nil, nil
	}
	var out []nvmlsim.ClaimDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, nvmlsim.ClaimDevice{Driver: r.Driver, Pool: r.Pool, Device: r.Device})
	}
	return out, nil
}
