package config

import "time"

// Webhook is how Alertmanager authenticates to POST /webhook: a bearer
// token, basic auth, or both (either one passes).
type Webhook struct {
	// BearerTokenFile holds the token Alertmanager sends
	// (http_config.authorization of its webhook receiver).
	BearerTokenFile string `yaml:"bearer_token_file"`
	// BasicAuth is the user and password Alertmanager sends instead
	// (http_config.basic_auth).
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// MaxBodyBytes bounds a notification's size. Default 32MiB: about
	// 70,000 alerts; a notification refused for its size is never retried.
	MaxBodyBytes Bytes `yaml:"max_body_bytes"`
	// MaxConcurrent bounds the notifications read and decoded at once, so
	// that memory stays near MaxConcurrent times MaxBodyBytes whatever
	// Alertmanager sends; the others wait for a turn. Default 4.
	MaxConcurrent int `yaml:"max_concurrent"`
	// AnswerWithin bounds how long a notification waits for its decisions
	// to be written: then it is kept in the store's journal and answered
	// while they are still written (Alertmanager would time out and
	// retry). Default 1s.
	AnswerWithin Duration `yaml:"answer_within"`

	BearerToken string `yaml:"-"`
}

func (w *Webhook) validate(c *checker) {
	if w.BearerTokenFile == "" && w.BasicAuth == nil {
		c.errorf("webhook", "needs bearer_token_file or basic_auth: the webhook never accepts unauthenticated notifications")
	}
	w.BearerToken = c.secret("webhook.bearer_token_file", w.BearerTokenFile)
	c.basicAuth("webhook.basic_auth", w.BasicAuth)
	if w.MaxBodyBytes == 0 {
		w.MaxBodyBytes = 32 << 20
	}
	if w.MaxConcurrent == 0 {
		w.MaxConcurrent = 4
	}
	if w.MaxConcurrent < 1 || w.MaxConcurrent > 1024 {
		c.errorf("webhook.max_concurrent", "%d is not from 1 to 1024", w.MaxConcurrent)
	}
	if w.AnswerWithin == 0 {
		w.AnswerWithin = Duration(time.Second)
	}
	if w.AnswerWithin < 0 || time.Duration(w.AnswerWithin) > 30*time.Second {
		c.errorf("webhook.answer_within", "%s is not from 0s to 30s: Alertmanager stops waiting for an answer", time.Duration(w.AnswerWithin))
	}
	if w.MaxBodyBytes < 1024 {
		c.errorf("webhook.max_body_bytes", "%d is too small for one notification (at least 1KiB)", w.MaxBodyBytes)
	}
}
