// Package kubeapi reads a few objects from a Kubernetes API server with
// plain REST calls, for the binaries that run on every node (the exporter
// and its simulated twin): a Kubernetes client library would weigh more
// than the exporter it serves. It reads the pod's service account, or a
// kubeconfig with a bearer token.
package kubeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v2"
)

// serviceAccount is where a pod finds its credentials.
const serviceAccount = "/var/run/secrets/kubernetes.io/serviceaccount"

// maxBody bounds an answer: a node's pods or ResourceSlices, not a cluster's.
const maxBody = 32 << 20

// Client calls one API server as one identity.
type Client struct {
	server string
	// token is the bearer token; tokenFile, when set, is read again on
	// every call (a projected service account token rotates).
	token, tokenFile string
	http             *http.Client
}

// New returns a client from a kubeconfig, or from the pod's service
// account when kubeconfig is "".
func New(kubeconfig string) (*Client, error) {
	if kubeconfig != "" {
		return fromKubeconfig(kubeconfig)
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a pod (KUBERNETES_SERVICE_HOST and _PORT unset): give a kubeconfig")
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccount, "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate", filepath.Join(serviceAccount, "ca.crt"))
	}
	return &Client{server: "https://" + net.JoinHostPort(host, port), tokenFile: filepath.Join(serviceAccount, "token"),
		http: httpClient(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool})}, nil
}

func httpClient(c *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
}

// kubeconfig holds the fields of a kubeconfig the client uses.
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

// fromKubeconfig reads a kubeconfig whose current context has a bearer
// token (what the demo and the tests write).
func fromKubeconfig(path string) (*Client, error) {
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
	c := &Client{}
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
	c.http = httpClient(tlsCfg)
	return c, nil
}

// Get reads path (with its query) into v.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	token := c.token
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return err
		}
		token = strings.TrimSpace(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.server+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
