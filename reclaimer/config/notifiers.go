package config

import "fmt"

// Notifier sends messages to owners and admins.
type Notifier struct {
	// Type is log, webhook, slack or email.
	Type string `yaml:"type"`
	// URL receives a JSON POST per message (webhook), sent with HTTP.
	URL  string     `yaml:"url"`
	HTTP HTTPClient `yaml:",inline"`
	// Slack holds the Slack notifier's settings (type slack).
	Slack *Slack `yaml:"slack"`
	// Email holds the e-mail notifier's settings (type email).
	Email *Email `yaml:"email"`
}

// UnmarshalYAML starts a notifier from the HTTP client's defaults. (A
// section inline in another is decoded without its own UnmarshalYAML.)
func (n *Notifier) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Notifier
	*n = Notifier{HTTP: DefaultHTTPClient()}
	return unmarshal((*plain)(n))
}

func (cfg *Config) validateNotifiers(c *checker) {
	if len(cfg.Notifiers) == 0 {
		cfg.Notifiers = []Notifier{{Type: "log"}}
	}
	slackAt := -1
	for i := range cfg.Notifiers {
		nf := &cfg.Notifiers[i]
		field := fmt.Sprintf("notifiers[%d]", i)
		if nf.Type == "slack" {
			if slackAt >= 0 {
				// One app answers the buttons at one /slack/interactions.
				c.errorf(field+".type", "a second slack notifier (notifiers[%d] is one): one at most", slackAt)
			}
			slackAt = i
		}
		switch nf.Type {
		case "log":
		case "webhook":
			c.url(field+".url", nf.URL, true)
			c.httpClient(field, &nf.HTTP)
		case "slack":
			if nf.Slack == nil {
				c.errorf(field+".slack", "is required for a slack notifier")
			} else {
				nf.Slack.validate(c, field+".slack")
			}
		case "email":
			if nf.Email == nil {
				c.errorf(field+".email", "is required for an email notifier")
			} else {
				nf.Email.validate(c, field+".email")
			}
		default:
			c.errorf(field+".type", "%q is not one of log, webhook, slack, email", nf.Type)
		}
		if nf.Type != "slack" && nf.Slack != nil {
			c.errorf(field+".slack", "is only for type slack")
		}
		if nf.Type != "email" && nf.Email != nil {
			c.errorf(field+".email", "is only for type email")
		}
		if nf.Type != "webhook" && (nf.URL != "" || httpClientSet(&nf.HTTP)) {
			c.errorf(field, "url, credentials, tls_config and the other HTTP settings are only for type webhook")
		}
	}
}
