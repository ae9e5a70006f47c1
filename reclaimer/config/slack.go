package config

import (
	"fmt"
	"regexp"
	"time"
)

// Slack is the Slack notifier: who to tell, with which token, and who may
// press the buttons.
type Slack struct {
	// TokenFile holds the bot token (xoxb-...).
	TokenFile string `yaml:"token_file"`
	// SigningSecretFile holds the app's signing secret, for /slack/interactions.
	SigningSecretFile string `yaml:"signing_secret_file"`
	// APIURL is Slack's Web API. Default https://slack.com/api/.
	APIURL string `yaml:"api_url"`
	// DefaultChannel gets what no owner or namespace channel can be found for.
	DefaultChannel string `yaml:"default_channel"`
	// AdminChannel gets failures, the circuit breaker and undeliverable warnings.
	AdminChannel string `yaml:"admin_channel"`
	// NamespaceChannels post a namespace's messages to its channel too.
	NamespaceChannels map[string]string `yaml:"namespace_channels"`
	// Users maps Unix users (bare metal) to Slack user ids or e-mail addresses.
	Users map[string]string `yaml:"users"`
	// EmailDomain turns a Unix user without a mapping into user@domain.
	EmailDomain string `yaml:"email_domain"`
	// Admins are Slack user ids that may press any button, not only their own.
	Admins []string `yaml:"admins"`
	// RequireDelivered holds a reclaim until the owner's warning was
	// delivered (to the owner, or to a channel). Default true.
	RequireDelivered *bool `yaml:"require_delivered"`
	// MaxRequestsPerMinute stays inside Slack's rate tiers. Default 50 (tier 3).
	MaxRequestsPerMinute int `yaml:"max_requests_per_minute"`
	// Snoozes are the snooze buttons' durations. Default [1h, 4h, 24h].
	Snoozes []Duration `yaml:"snoozes"`
	// PricePerGPUHour and Currency price the idle time in the warning. Default 2.5 USD.
	PricePerGPUHour float64 `yaml:"price_per_gpu_hour"`
	Currency        string  `yaml:"currency"`

	// HTTP reaches Slack's API through a proxy or behind a private CA
	// (proxy_url, tls_config); the bot token authenticates, so it takes no
	// credentials.
	HTTP HTTPClient `yaml:",inline"`

	Token         string `yaml:"-"`
	SigningSecret string `yaml:"-"`
}

// SnoozeDurations are the snooze buttons' durations.
func (s *Slack) SnoozeDurations() []time.Duration {
	var out []time.Duration
	for _, d := range s.Snoozes {
		out = append(out, time.Duration(d))
	}
	return out
}

// MustDeliver says whether a reclaim waits for a delivered warning.
func (s *Slack) MustDeliver() bool { return s.RequireDelivered == nil || *s.RequireDelivered }

var (
	slackChannel = regexp.MustCompile(`^([CGD][A-Z0-9]{2,}|#[a-z0-9][a-z0-9._-]{0,79})$`)
	slackUser    = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)
	email        = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	domain       = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$`)
)

// UnmarshalYAML starts from the HTTP client's defaults.
func (s *Slack) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Slack
	*s = Slack{HTTP: DefaultHTTPClient()}
	return unmarshal((*plain)(s))
}

func (s *Slack) validate(c *checker, field string) {
	if hasCredentials(&s.HTTP) {
		c.errorf(field+".authorization", "the bot token (token_file) authenticates to Slack: give a proxy or tls_config here, no credentials")
	}
	c.httpClient(field, &s.HTTP)
	if s.TokenFile == "" {
		c.errorf(field+".token_file", "is required")
	}
	if s.SigningSecretFile == "" {
		c.errorf(field+".signing_secret_file", "is required: button presses must be verified")
	}
	s.Token = c.secret(field+".token_file", s.TokenFile)
	s.SigningSecret = c.secret(field+".signing_secret_file", s.SigningSecretFile)
	if s.APIURL == "" {
		s.APIURL = "https://slack.com/api/"
	}
	c.url(field+".api_url", s.APIURL, true)
	for name, ch := range map[string]string{"default_channel": s.DefaultChannel, "admin_channel": s.AdminChannel} {
		if ch != "" && !slackChannel.MatchString(ch) {
			c.errorf(field+"."+name, "%q is not a channel id (C…) or #name", ch)
		}
	}
	for ns, ch := range s.NamespaceChannels {
		if !slackChannel.MatchString(ch) {
			c.errorf(fmt.Sprintf("%s.namespace_channels.%s", field, ns), "%q is not a channel id (C…) or #name", ch)
		}
	}
	for u, who := range s.Users {
		if !slackUser.MatchString(who) && !email.MatchString(who) {
			c.errorf(fmt.Sprintf("%s.users.%s", field, u), "%q is neither a Slack user id (U…) nor an e-mail address", who)
		}
	}
	if s.EmailDomain != "" && !domain.MatchString(s.EmailDomain) {
		c.errorf(field+".email_domain", "%q is not a domain", s.EmailDomain)
	}
	for i, a := range s.Admins {
		if !slackUser.MatchString(a) {
			c.errorf(fmt.Sprintf("%s.admins[%d]", field, i), "%q is not a Slack user id (U…)", a)
		}
	}
	if s.MaxRequestsPerMinute == 0 {
		s.MaxRequestsPerMinute = 50
	}
	if s.MaxRequestsPerMinute < 0 {
		c.errorf(field+".max_requests_per_minute", "must be positive")
	}
	if len(s.Snoozes) == 0 {
		s.Snoozes = []Duration{Duration(time.Hour), Duration(4 * time.Hour), Duration(24 * time.Hour)}
	}
	if len(s.Snoozes) > 3 {
		c.errorf(field+".snoozes", "%d buttons: at most 3 fit beside keep and release", len(s.Snoozes))
	}
	for i, d := range s.Snoozes {
		if d < Duration(time.Second) || time.Duration(d)%time.Second != 0 {
			c.errorf(fmt.Sprintf("%s.snoozes[%d]", field, i), "%s must be whole seconds, at least 1s", d)
		}
	}
	if s.PricePerGPUHour == 0 {
		s.PricePerGPUHour = 2.5
	}
	if s.PricePerGPUHour < 0 {
		c.errorf(field+".price_per_gpu_hour", "must not be negative")
	}
	if s.Currency == "" {
		s.Currency = "USD"
	}
	if !regexp.MustCompile(`^[A-Z]{3}$`).MatchString(s.Currency) {
		c.errorf(field+".currency", "%q is not an ISO 4217 code (e.g. USD)", s.Currency)
	}
}
