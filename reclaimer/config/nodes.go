package config

import (
	"fmt"
	"strings"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Nodes is how the reclaimer reaches the exporters' action endpoints.
type Nodes struct {
	// URLTemplate builds a node's action endpoint from its name, e.g.
	// "http://{{ .Node }}:9848". Default "http://{{ .Node }}:9848".
	URLTemplate string `yaml:"url_template"`
	// Addresses, when given, are the nodes' endpoints: a node not listed is
	// refused (the template is not used).
	Addresses map[string]string `yaml:"addresses"`
	HTTP      HTTPClient        `yaml:",inline"`
	// Timeout of one call; a kill waits out the node's checkpoint grace. Default 2m.
	Timeout Duration `yaml:"timeout"`
	// KillGrace is the nodes' --action.kill-grace: a kill's answer comes
	// after it, so the timeout must be longer. Default 30s.
	KillGrace Duration `yaml:"kill_grace"`

	tmpl *template.Template
}

// URL is the action endpoint of a node. The name comes from an alert's
// label, which whoever can post to Alertmanager sets: it must be a node
// listed in addresses when there is a list, else a DNS-1123 name, so that
// no label chooses the host, port, path or credentials a request (and the
// node bearer token) goes to.
func (n Nodes) URL(node string) (string, error) {
	if a, ok := n.Addresses[node]; ok {
		return a, nil
	}
	if len(n.Addresses) > 0 {
		return "", fmt.Errorf("node %q is not in nodes.addresses", node)
	}
	if errs := validation.IsDNS1123Subdomain(node); len(errs) > 0 {
		return "", fmt.Errorf("node %q is not a node name: %s", node, strings.Join(errs, "; "))
	}
	return n.render(node)
}

func (n Nodes) render(node string) (string, error) {
	var b strings.Builder
	if err := n.tmpl.Execute(&b, struct{ Node string }{node}); err != nil {
		return "", err
	}
	return b.String(), nil
}

func (n *Nodes) validate(c *checker) {
	if n.URLTemplate == "" {
		n.URLTemplate = "http://{{ .Node }}:9848"
	}
	if t, err := template.New("node").Option("missingkey=error").Parse(n.URLTemplate); err != nil {
		c.errorf("nodes.url_template", "%v", err)
	} else {
		n.tmpl = t
		if u, err := n.render("node-1"); err != nil {
			c.errorf("nodes.url_template", "%v", err)
		} else {
			c.url("nodes.url_template", u, true)
		}
	}
	for node, a := range n.Addresses {
		c.url("nodes.addresses."+node, a, true)
	}
	c.httpClient("nodes", &n.HTTP)
	c.duration("nodes.timeout", &n.Timeout, 2*time.Minute)
	c.duration("nodes.kill_grace", &n.KillGrace, 30*time.Second)
	if time.Duration(n.Timeout) < time.Duration(n.KillGrace)+killCheckMargin {
		c.errorf("nodes.timeout", "%s is too short for nodes.kill_grace %s: a kill answers after the grace and the node's check (%s more); the call would be cut off and retried while the kill runs", n.Timeout, n.KillGrace, killCheckMargin)
	}
}
