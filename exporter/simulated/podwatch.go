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
// too. It lists the node's pods with one plain API call per sample rather
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
	running, err := w.api.runningPods(ctx, w.node)
	if err != nil {
		w.log.Warn("listing the simulated node's pods", "err", err)
		return
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

// runningPods lists the node's pods that are not terminating, as namespace/name.
func (c *apiClient) runningPods(ctx context.Context, node string) (map[string]bool, error) {
	u := c.server + "/api/v1/pods?fieldSelector=" + url.QueryEscape("spec.nodeName="+node)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("listing pods: %s", resp.Status)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				Namespace         string  `json:"namespace"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	if list.Items == nil {
		return nil, errors.New("listing pods: no item list in the answer")
	}
	out := make(map[string]bool, len(list.Items))
	for _, p := range list.Items {
		if p.Metadata.DeletionTimestamp == nil {
			out[p.Metadata.Namespace+"/"+p.Metadata.Name] = true
		}
	}
	return out, nil
}
