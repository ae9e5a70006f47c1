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
var grafana = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "5m", "${datasource}", "prometheus", "$node", ".*", "$uuid", ".*")

// dashboards runs every panel query of every dashboard against this
// Prometheus and wants data from each.
func (su *suite) dashboards(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(tooltest.Root(t), "dashboards", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
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
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				q := grafana.Replace(tg.Expr)
				n, err := count(su.s.PrometheusURL, q)
				assert.NoError(t, err, "%s: %s", filepath.Base(f), p.Title)
				assert.NotZero(t, n, "%s: panel %q returns no data: %s", filepath.Base(f), p.Title, q)
			}
		}
	}
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
