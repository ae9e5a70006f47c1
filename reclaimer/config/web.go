package config

// Web is who may read the status page and the API (GET / and GET
// /api/v1/...). The webhook, Slack's interactions, the restore call and the
// health probes have their own auth, or none.
type Web struct {
	Auth WebAuth `yaml:"auth"`
}

// WebAuth is a bearer token, basic auth (either passes), or none: true said
// outright: the page shows owners, Unix users and Slack ids.
type WebAuth struct {
	// BearerTokenFile holds the token a reader sends.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// BasicAuth is a reader's user and password.
	BasicAuth *BasicAuth `yaml:"basic_auth"`
	// None lets anyone read, said outright.
	None bool `yaml:"none"`

	BearerToken string `yaml:"-"`
}

// BasicAuth is a username and a password read from a file.
type BasicAuth struct {
	// Username is the user the caller sends.
	Username string `yaml:"username"`
	// PasswordFile holds the password the caller sends.
	PasswordFile string `yaml:"password_file"`

	Password string `yaml:"-"`
}

func (w *Web) validate(c *checker) {
	wa := &w.Auth
	switch {
	case wa.None && (wa.BearerTokenFile != "" || wa.BasicAuth != nil):
		c.errorf("web.auth", "none: true and credentials: choose one")
	case !wa.None && wa.BearerTokenFile == "" && wa.BasicAuth == nil:
		c.errorf("web.auth", "is required: bearer_token_file, basic_auth, or none: true (the status page and the API show owners, Unix users and Slack ids)")
	}
	wa.BearerToken = c.secret("web.auth.bearer_token_file", wa.BearerTokenFile)
	c.basicAuth("web.auth.basic_auth", wa.BasicAuth)
}

func (c *checker) basicAuth(field string, b *BasicAuth) {
	if b == nil {
		return
	}
	if b.Username == "" {
		c.errorf(field+".username", "is required")
	}
	if b.PasswordFile == "" {
		c.errorf(field+".password_file", "is required")
	}
	b.Password = c.secret(field+".password_file", b.PasswordFile)
}
