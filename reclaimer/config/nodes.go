package config

import (
	"strings"
	"text/template"
	"time"
)

// Nodes is how the reclaimer reaches the exporters' action endpoints.
type Nodes struct {
	// URLTemplate builds a node's action endpoint from its name, e.g.
	// "http://{{ .Node }}:9848". Default "http://{{ .Node }}:9848".
	URLTemplate string `yaml:"url_template"`
	// Addresses override the template per node.
	Addresses map[string]string `yaml:"addresses"`
	HTTP      HTTPClient        `yaml:",inline"`
	// Timeout of one call; a kill waits out the node's checkpoint grace. Default 2m.
	Timeout Duration `yaml:"timeout"`
	// KillGrace is the nodes' --action.kill-grace: a kill's answer comes
	// after it, so the timeout must be longer. Default 30s.
	KillGrace Duration `yaml:"kill_grace"`

	tmpl *template.Template
}

// URL is the action endpoint of a node.
func (n Nodes) URL(node string) (string, error) {
	if a, ok := n.Addresses[node]; ok {
		return a, nil
	}
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
		if u, err := n.URL("node-1"); err != nil {
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
