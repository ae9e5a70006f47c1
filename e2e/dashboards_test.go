package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/tooltest"
)

// grafana stands in for the variables Grafana substitutes.
var grafana = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "5m", "${datasource}", "prometheus", "$node", ".*", "$uuid", ".*", "$cluster", ".*")

// dashboards runs every panel query of every dashboard against this
// Prometheus and wants data from each.
func (su *suite) dashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(tooltest.Root(t), "dashboards", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		for _, p := range panels(t, f) {
			for _, expr := range p.exprs {
				q := grafana.Replace(expr)
				n, err := count(su.s.PrometheusURL, q)
				assert.NoError(t, err, "%s: %s", filepath.Base(f), p.title)
				assert.NotZero(t, n, "%s: panel %q returns no data: %s", filepath.Base(f), p.title, q)
			}
		}
	}
}

// panel is a dashboard panel's title and queries.
type panel struct {
	title string
	exprs []string
}

// panels are a dashboard file's panels that query.
func panels(t *testing.T, file string) []panel {
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var out []panel
	for _, p := range d.Panels {
		var exprs []string
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		if len(exprs) > 0 {
			out = append(out, panel{p.Title, exprs})
		}
	}
	return out
}

func count(prom, q string) (int, error) {
	resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, err
	}
	if r.Status != "success" {
		return 0, &queryError{r.Error}
	}
	var list []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &list); err != nil {
		return 1, nil // a scalar
	}
	return len(list), nil
}

type queryError struct{ msg string }

func (e *queryError) Error() string { return e.msg }
