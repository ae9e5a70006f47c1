package config

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	promconfig "github.com/prometheus/common/config"
	"go.yaml.in/yaml/v3"
)

// HTTPClient is how the reclaimer reaches a service over HTTP, written as
// Prometheus writes it and inline in each section that calls out
// (alertmanager, prometheus, nodes, slurm, kubernetes.jupyterhub, a webhook
// notifier, a slack notifier's slack): authorization, basic_auth, oauth2,
// tls_config (ca_file, cert_file, key_file, server_name, min_version),
// proxy_url, follow_redirects, enable_http2, http_headers. A secret is given inline
// (printed as <secret>) or as a *_file, read at every request, so a rotated
// token needs no restart.
type HTTPClient = promconfig.HTTPClientConfig

// DefaultHTTPClient is a section's HTTP client unless the file says
// otherwise: Prometheus's defaults (follow redirects, HTTP/2), and the
// proxy of the environment (HTTPS_PROXY, NO_PROXY) as the reclaimer's
// clients always had; a proxy_url replaces it.
func DefaultHTTPClient() HTTPClient {
	h := promconfig.DefaultHTTPClientConfig
	h.ProxyFromEnvironment = true
	return h
}

// userAgent is what every outbound request says it is.
const userAgent = "gpureclaim-reclaimer"

// NewHTTPClient builds the client a section describes; each request ends
// within timeout. name tells its metrics and errors apart.
func NewHTTPClient(h HTTPClient, name string, timeout time.Duration, opts ...promconfig.HTTPClientOption) (*http.Client, error) {
	c, err := promconfig.NewClientFromConfig(h, name, append([]promconfig.HTTPClientOption{promconfig.WithUserAgent(userAgent)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.Timeout = timeout
	return c, nil
}

// httpClient checks a section's HTTP client: relative files resolve
// against the config's folder, Prometheus's own checks run, the deprecated
// bearer_token_file is read as authorization with a warning, and (when
// secrets are read) every file it names is read once and the client built,
// so that a missing CA or a key that does not match its certificate is a
// config error that names the field, not a failure at the first action.
func (c *checker) httpClient(field string, h *HTTPClient) {
	switch {
	case h.BearerTokenFile != "":
		c.warnf(field+".bearer_token_file", "is deprecated and goes in a later release: write authorization: {credentials_file: %s}", h.BearerTokenFile)
	case h.BearerToken != "":
		c.warnf(field+".bearer_token", "is deprecated and goes in a later release: write authorization: {credentials: ...}")
	}
	h.SetDirectory(c.dir)
	if h.ProxyURL.URL != nil || h.NoProxy != "" {
		h.ProxyFromEnvironment = false // the file names its proxy
	}
	if err := h.Validate(); err != nil {
		c.errorf(field, "%v", err)
		return
	}
	if c.skipSecrets {
		return
	}
	ok := true
	files := clientFiles(h)
	for _, key := range slices.Sorted(maps.Keys(files)) {
		if path := files[key]; path != "" {
			if _, read := c.read(field+"."+key, path); !read {
				ok = false
			}
		}
	}
	if !ok {
		return
	}
	if _, err := NewHTTPClient(*h, field, 0); err != nil {
		c.errorf(field, "%v", strings.TrimPrefix(err.Error(), field+": "))
	}
}

// clientFiles are the files an HTTP client reads, by their key.
func clientFiles(h *HTTPClient) map[string]string {
	files := map[string]string{
		"tls_config.ca_file":   h.TLSConfig.CAFile,
		"tls_config.cert_file": h.TLSConfig.CertFile,
		"tls_config.key_file":  h.TLSConfig.KeyFile,
	}
	if a := h.Authorization; a != nil {
		files["authorization.credentials_file"] = a.CredentialsFile
	}
	if b := h.BasicAuth; b != nil {
		files["basic_auth.username_file"] = b.UsernameFile
		files["basic_auth.password_file"] = b.PasswordFile
	}
	if o := h.OAuth2; o != nil {
		files["oauth2.client_secret_file"] = o.ClientSecretFile
	}
	if hs := h.HTTPHeaders; hs != nil {
		for name, v := range hs.Headers {
			for i, f := range v.Files {
				files[fmt.Sprintf("http_headers.%s.files[%d]", name, i)] = f
			}
		}
	}
	return files
}

// hasCredentials says whether a section's HTTP client authenticates.
func hasCredentials(h *HTTPClient) bool {
	return h.Authorization != nil || h.BasicAuth != nil || h.OAuth2 != nil || h.BearerToken != "" || h.BearerTokenFile != ""
}

// httpClientSet says whether a section names any HTTP client setting
// beyond the defaults: credentials, TLS, a proxy or headers.
func httpClientSet(h *HTTPClient) bool {
	return hasCredentials(h) || h.TLSConfig != (promconfig.TLSConfig{}) || h.ProxyURL.URL != nil || h.HTTPHeaders != nil
}

// read reads a file the config names, trimmed; a file that cannot be read
// or is empty is recorded as the field's error.
func (c *checker) read(field, path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		c.errorf(field, "%v", err)
		return "", false
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		c.errorf(field, "%s is empty", path)
		return "", false
	}
	return s, true
}

// selfChecking are the client settings whose decoding checks them, with
// an error that does not say where.
var selfChecking = map[string]func() any{
	"tls_config": func() any { return new(promconfig.TLSConfig) },
	"oauth2":     func() any { return new(promconfig.OAuth2) },
	"basic_auth": func() any { return new(promconfig.BasicAuth) },
	"proxy_url":  func() any { return new(promconfig.URL) },
}

// locate names the field of a decoding error that one of those settings
// raised, by decoding each on its own.
func locate(b []byte, err error) error {
	var root yaml.Node
	if yaml.Unmarshal(b, &root) != nil {
		return err
	}
	if field := raised(&root, "", err.Error()); field != "" {
		return fmt.Errorf("%s: %w", field, err)
	}
	return err
}

func raised(n *yaml.Node, path, msg string) string {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if f := raised(c, path, msg); f != "" {
				return f
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if f := raised(c, fmt.Sprintf("%s[%d]", path, i), msg); f != "" {
				return f
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, v := n.Content[i].Value, n.Content[i+1]
			p := key
			if path != "" {
				p = path + "." + key
			}
			if fresh, ok := selfChecking[key]; ok {
				if err := v.Decode(fresh()); err != nil && strings.Contains(msg, err.Error()) {
					return p
				}
			}
			if f := raised(v, p, msg); f != "" {
				return f
			}
		}
	}
	return ""
}
