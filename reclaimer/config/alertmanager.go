package config

import "time"

// Alertmanager is where the reclaimer re-checks alerts and creates silences.
type Alertmanager struct {
	// URL of Alertmanager (its API v2 is under /api/v2). Required.
	URL  string     `yaml:"url"`
	HTTP HTTPClient `yaml:",inline"`
	// Timeout of one API call. Default 10s.
	Timeout Duration `yaml:"timeout"`
}

func (am *Alertmanager) validate(c *checker) {
	c.url("alertmanager.url", am.URL, true)
	c.httpClient("alertmanager", &am.HTTP)
	c.duration("alertmanager.timeout", &am.Timeout, 10*time.Second)
}
