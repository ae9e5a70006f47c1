package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Email sends the reclaimer's messages over SMTP (type email): the owner's
// warning and outcome to the owner's address, admin messages to Admins.
type Email struct {
	// Smarthost is the SMTP server, host:port.
	Smarthost string `yaml:"smarthost"`
	// From is the sender's address.
	From string `yaml:"from"`
	// TLS is starttls (default: the server must offer it), tls (TLS from
	// the first byte, as on port 465) or none (a relay on the same host
	// only: nothing else may be sent in the clear).
	TLS string `yaml:"tls"`
	// CAFile verifies the server's certificate with a private CA; default
	// the system's roots.
	CAFile string `yaml:"ca_file"`
	// Username and PasswordFile authenticate (PLAIN, over TLS only).
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	// Admins receive admin messages, and owners' messages that have no
	// owner address.
	Admins []string `yaml:"admins"`
	// Users maps bare-metal Unix users to addresses; EmailDomain makes
	// <user>@<domain> of the others. A pod's owner is its (or its
	// namespace's) gpureclaim.io/owner annotation, when an address.
	Users       map[string]string `yaml:"users"`
	EmailDomain string            `yaml:"email_domain"`

	Password string `yaml:"-"`
	CA       []byte `yaml:"-"`
}

// Values of Email.TLS.
const (
	EmailSTARTTLS = "starttls"
	EmailTLS      = "tls"
	EmailNoTLS    = "none"
)

func (e *Email) validate(c *checker, field string) {
	host, _, err := net.SplitHostPort(e.Smarthost)
	if err != nil || host == "" {
		c.errorf(field+".smarthost", "%q is not host:port", e.Smarthost)
	}
	if !email.MatchString(e.From) || strings.ContainsAny(e.From, "\r\n<>") {
		c.errorf(field+".from", "%q is not an e-mail address", e.From)
	}
	switch e.TLS {
	case "":
		e.TLS = EmailSTARTTLS
	case EmailSTARTTLS, EmailTLS:
	case EmailNoTLS:
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			c.errorf(field+".tls", "none sends in the clear: only to a relay on this host (localhost), not %q", host)
		}
	default:
		c.errorf(field+".tls", "%q is not starttls, tls or none", e.TLS)
	}
	if (e.Username == "") != (e.PasswordFile == "") {
		c.errorf(field+".username", "and password_file go together")
	}
	e.Password = c.secret(field+".password_file", e.PasswordFile)
	if e.CAFile != "" && !c.skipSecrets {
		p := e.CAFile
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.dir, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			c.errorf(field+".ca_file", "%v", err)
		}
		e.CA = b
	}
	for i, a := range e.Admins {
		if !email.MatchString(a) || strings.ContainsAny(a, "\r\n<>,") {
			c.errorf(fmt.Sprintf("%s.admins[%d]", field, i), "%q is not an e-mail address", a)
		}
	}
	for u, a := range e.Users {
		if !email.MatchString(a) || strings.ContainsAny(a, "\r\n<>,") {
			c.errorf(fmt.Sprintf("%s.users.%s", field, u), "%q is not an e-mail address", a)
		}
	}
	if e.EmailDomain != "" && !domain.MatchString(e.EmailDomain) {
		c.errorf(field+".email_domain", "%q is not a domain", e.EmailDomain)
	}
}
