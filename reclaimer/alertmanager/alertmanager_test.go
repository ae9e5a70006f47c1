package alertmanager_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/amtest"
	"github.com/gpureclaim/gpureclaim/internal/testkit/tlstest"
	"github.com/gpureclaim/gpureclaim/reclaimer/alertmanager"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

func TestCheckAndSilenceAgainstARealAlertmanager(t *testing.T) {
	am := amtest.Start(t, amtest.Config("http://127.0.0.1:1/none", "x", time.Hour))
	c, err := alertmanager.New(config.Alertmanager{URL: am.URL, Timeout: config.Duration(5 * time.Second)})
	require.NoError(t, err)
	ctx := context.Background()

	start := time.Now().Add(-15 * time.Minute).Truncate(time.Second).UTC()
	labels := map[string]string{"alertname": "GPUIdle", "uuid": "GPU-1", "node": "n1", "namespace": "ml", "pod": "nb-0", "audience": "reclaimer"}
	people := map[string]string{"alertname": "GPUIdle", "uuid": "GPU-1", "node": "n1", "namespace": "ml", "pod": "nb-0", "audience": "people"}
	am.Push(t, amtest.Alert{Labels: labels, StartsAt: start}, amtest.Alert{Labels: people, StartsAt: start})
	fp := model.LabelsToSignature(labels)
	r := &reclaim.Reclaim{Fingerprint: model.Fingerprint(fp).String(), StartsAt: start,
		Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Namespace: "ml", Pod: "nb-0"}}

	chk, err := c.Check(ctx, r)
	require.NoError(t, err)
	require.Equal(t, reclaim.AlertActive, chk.Status)

	// A later episode of the same alert is not this one.
	old := *r
	old.StartsAt = start.Add(-time.Hour)
	chk, err = c.Check(ctx, &old)
	require.NoError(t, err)
	require.Equal(t, reclaim.AlertGone, chk.Status)

	until := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	id, err := c.CreateSilence(ctx, alertmanager.Silence{Target: r.Target, Receiver: map[string]string{"audience": "reclaimer"},
		CreatedBy: "alice (Slack U0ALICE)", Comment: "snoozed from Slack", Start: time.Now(), End: until})
	require.NoError(t, err)
	require.NotEmpty(t, id)
	require.Eventually(t, func() bool {
		chk, err = c.Check(ctx, r)
		return err == nil && chk.Status == reclaim.AlertSilenced
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, until, chk.Until.UTC())
	require.Contains(t, chk.Reason, "alice (Slack U0ALICE) until")
	require.Contains(t, chk.Reason, "snoozed from Slack")

	// The people's copy is not muted.
	peopleR := *r
	peopleR.Fingerprint = model.Fingerprint(model.LabelsToSignature(people)).String()
	chk, err = c.Check(ctx, &peopleR)
	require.NoError(t, err)
	require.Equal(t, reclaim.AlertActive, chk.Status, "the silence mutes the reclaimer's copy only")

	gone := *r
	gone.Fingerprint = "0000000000000000"
	chk, err = c.Check(ctx, &gone)
	require.NoError(t, err)
	require.Equal(t, reclaim.AlertGone, chk.Status)
}

func TestUnreachableAlertmanagerIsAnError(t *testing.T) {
	c, err := alertmanager.New(config.Alertmanager{URL: "http://127.0.0.1:1", Timeout: config.Duration(time.Second)})
	require.NoError(t, err)
	_, err = c.Check(context.Background(), &reclaim.Reclaim{Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1"}})
	require.Error(t, err)
}

// Alertmanager behind a private CA, and behind mutual TLS, with basic auth.
func TestTLS(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "reclaimer" || p != "pw" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	})
	tlstest.Check(t, api, func(t *testing.T, url string, hc config.HTTPClient) error {
		hc.BasicAuth = &promconfig.BasicAuth{Username: "reclaimer", Password: "pw"}
		c, err := alertmanager.New(config.Alertmanager{URL: url, HTTP: hc, Timeout: config.Duration(5 * time.Second)})
		require.NoError(t, err)
		_, err = c.Check(context.Background(), &reclaim.Reclaim{Target: reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1"}})
		return err
	})
}
