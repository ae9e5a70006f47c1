package config

import (
	"net/url"
	"path/filepath"
	"regexp"
	"time"
)

// Slurm is how the reclaimer reaches slurmrestd to cancel the Slurm jobs
// that hold idle GPUs.
type Slurm struct {
	// URL of slurmrestd: unix:///path/to/socket (rest_auth/local: the
	// reclaimer runs as slurmrestd's user) or http(s)://host:6820
	// (rest_auth/jwt, with token_file and user_name). Empty: off.
	URL string `yaml:"url"`
	// TokenFile holds a JWT (scontrol token) for rest_auth/jwt, sent as
	// slurmrestd's X-SLURM-USER-TOKEN and read at every call (a token
	// renewed in the file is used at once).
	TokenFile string `yaml:"token_file"`
	// UserName is the Slurm user the token is for.
	UserName string `yaml:"user_name"`
	// APIVersion is the OpenAPI plugin's version, e.g. v0.0.38 (Slurm
	// 22.05) or v0.0.42. Default v0.0.38.
	APIVersion string `yaml:"api_version"`
	// Timeout of one call. Default 30s.
	Timeout Duration `yaml:"timeout"`
	// Scontrol is the scontrol a requeue runs (`scontrol requeue`): the
	// slurmrestd of Slurm before 26.05 has no requeue. It needs Slurm's
	// client and munge on the reclaimer's host. Default: scontrol on the PATH.
	Scontrol string `yaml:"scontrol"`
	// HTTP is the client for http(s) URLs: TLS, a proxy.
	HTTP HTTPClient `yaml:",inline"`
}

// On says whether the reclaimer can reach Slurm.
func (s Slurm) On() bool { return s.URL != "" }

var slurmAPIVersion = regexp.MustCompile(`^v0\.0\.[0-9]+$`)

func (s *Slurm) validate(c *checker) {
	if s.APIVersion == "" {
		s.APIVersion = "v0.0.38"
	}
	c.duration("slurm.timeout", &s.Timeout, 30*time.Second)
	if s.Scontrol == "" {
		s.Scontrol = "scontrol"
	}
	if !s.On() {
		if s.TokenFile != "" || s.UserName != "" {
			c.errorf("slurm.url", "is required with slurm.token_file and slurm.user_name")
		}
		return
	}
	if !slurmAPIVersion.MatchString(s.APIVersion) {
		c.errorf("slurm.api_version", "%q is not an OpenAPI plugin version such as v0.0.38", s.APIVersion)
	}
	u, err := url.Parse(s.URL)
	switch {
	case err != nil:
		c.errorf("slurm.url", "%v", err)
	case u.Scheme == "unix":
		if u.Host != "" || u.Path == "" || !filepath.IsAbs(u.Path) {
			c.errorf("slurm.url", "%q: give the socket's absolute path, unix:///run/slurmrestd.socket", s.URL)
		}
		if s.TokenFile != "" {
			c.errorf("slurm.token_file", "a UNIX socket authenticates the reclaimer's own user (rest_auth/local): no token")
		}
	case u.Scheme == "http" || u.Scheme == "https":
		if u.Host == "" {
			c.errorf("slurm.url", "%q has no host", s.URL)
		}
		if s.TokenFile == "" || s.UserName == "" {
			c.errorf("slurm.token_file", "slurmrestd over the network needs a JWT (rest_auth/jwt): set slurm.token_file and slurm.user_name")
		}
	default:
		c.errorf("slurm.url", "%q is not unix:///path, http:// or https://", s.URL)
	}
	if s.TokenFile != "" && !filepath.IsAbs(s.TokenFile) {
		s.TokenFile = filepath.Join(c.dir, s.TokenFile)
	}
	if s.TokenFile != "" && !c.skipSecrets {
		c.read("slurm.token_file", s.TokenFile)
	}
	if err == nil && u.Scheme == "unix" && httpClientSet(&s.HTTP) {
		c.errorf("slurm.url", "a UNIX socket takes no credentials, TLS or proxy settings")
	}
	if hasCredentials(&s.HTTP) {
		c.errorf("slurm.token_file", "slurmrestd reads its own token header (rest_auth/jwt): give token_file and user_name, not authorization, basic_auth or oauth2")
	}
	c.httpClient("slurm", &s.HTTP)
}
