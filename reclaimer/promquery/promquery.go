// Package promquery asks Prometheus (or anything that serves its query
// API) whether a reclaimed workload is wanted again (a policy's
// restore_when), whether GPUs are wanted, when a pod's GPU was last
// active, and what the weekly report reads.
package promquery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/gpureclaim/gpureclaim/internal/promscope"
)

// Client queries one Prometheus.
type Client struct {
	URL string
	// HTTP carries the credentials and TLS (config.NewHTTPClient); nil is
	// http.DefaultClient.
	HTTP *http.Client
	// Timeout of one query; Prometheus is told it too.
	Timeout time.Duration
	// Scope, when set, is added to every series selector of every query
	// (config's cluster and cluster_label): on an engine that holds a
	// fleet's series, a reclaimer reads its own cluster's alone.
	Scope *labels.Matcher
}

// maxResponseBytes bounds what a query's answer may be: restore_when asks
// whether there is a sample, not for a fleet's series.
const maxResponseBytes = 4 << 20

type response struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	} `json:"data"`
}

// Demand says whether the instant query returns a sample now.
func (c *Client) Demand(ctx context.Context, query string) (bool, error) {
	result, err := c.instant(ctx, query)
	return len(result) > 0, err
}

// Sample is one element of an instant vector: its labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant query and returns its vector.
func (c *Client) Query(ctx context.Context, query string) ([]Sample, error) {
	result, err := c.instant(ctx, query)
	if err != nil {
		return nil, err
	}
	out := make([]Sample, 0, len(result))
	for _, s := range result {
		v, err := s.float()
		if err != nil {
			return nil, err
		}
		out = append(out, Sample{Labels: s.Metric, Value: v})
	}
	return out, nil
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// float is the sample's value.
func (s sample) float() (float64, error) {
	v, ok := s.Value[1].(string)
	if !ok {
		return 0, fmt.Errorf("a sample value %v that is not a string", s.Value[1])
	}
	return strconv.ParseFloat(v, 64)
}

// instant runs an instant query and returns its vector.
func (c *Client) instant(ctx context.Context, query string) ([]sample, error) {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	query, err := promscope.Scope(query, c.Scope)
	if err != nil {
		return nil, err
	}
	form := url.Values{"query": {query}}
	if c.Timeout > 0 {
		form.Set("timeout", c.Timeout.String())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.URL, "/")+"/api/v1/query", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxResponseBytes {
		return nil, fmt.Errorf("answer over %d bytes: make restore_when return fewer series", maxResponseBytes)
	}
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: not Prometheus's query API (%v)", resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", resp.Status, r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("the query returned a %s, not an instant vector", r.Data.ResultType)
	}
	out := make([]sample, 0, len(r.Data.Result))
	for _, raw := range r.Data.Result {
		var smp sample
		if err := json.Unmarshal(raw, &smp); err != nil {
			return nil, fmt.Errorf("a sample that is not one: %v", err)
		}
		out = append(out, smp)
	}
	return out, nil
}
