// Package alertmanager talks to Alertmanager through its API v2 Go client:
// it re-checks that an alert still fires, unsilenced, before any action, and
// creates the silences behind snooze and keep.
package alertmanager

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	httptransport "github.com/go-openapi/runtime/client"
	"github.com/go-openapi/strfmt"
	amclient "github.com/prometheus/alertmanager/api/v2/client"
	"github.com/prometheus/alertmanager/api/v2/client/alert"
	"github.com/prometheus/alertmanager/api/v2/client/silence"
	"github.com/prometheus/alertmanager/api/v2/models"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Client is an Alertmanager.
type Client struct {
	api     *amclient.AlertmanagerAPI
	timeout time.Duration
}

var _ reclaim.AlertChecker = (*Client)(nil)

// New connects to the Alertmanager of the config.
func New(c config.Alertmanager) (*Client, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, err
	}
	hc, err := config.NewHTTPClient(c.HTTP, "alertmanager", time.Duration(c.Timeout))
	if err != nil {
		return nil, err
	}
	tr := httptransport.NewWithClient(u.Host, path.Join(u.Path, amclient.DefaultBasePath), []string{u.Scheme}, hc)
	return &Client{api: amclient.New(tr, strfmt.Default), timeout: time.Duration(c.Timeout)}, nil
}

// Check finds the alert episode of a reclaim among Alertmanager's alerts.
func (c *Client) Check(ctx context.Context, r *reclaim.Reclaim) (reclaim.AlertCheck, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	filter := []string{fmt.Sprintf("alertname=%q", r.Target.Alertname), fmt.Sprintf("uuid=%q", r.Target.UUID)}
	params := alert.NewGetAlertsParamsWithContext(ctx).WithFilter(filter)
	resp, err := c.api.Alert.GetAlerts(params)
	if err != nil {
		return reclaim.AlertCheck{}, fmt.Errorf("alertmanager: listing alerts: %w", err)
	}
	for _, a := range resp.Payload {
		if a.Fingerprint == nil || *a.Fingerprint != r.Fingerprint {
			continue
		}
		if a.StartsAt == nil || !time.Time(*a.StartsAt).Equal(r.StartsAt) {
			return reclaim.AlertCheck{Status: reclaim.AlertGone}, nil // a new episode
		}
		if a.Status == nil || a.Status.State == nil || *a.Status.State != models.AlertStatusStateSuppressed {
			return reclaim.AlertCheck{Status: reclaim.AlertActive}, nil
		}
		if len(a.Status.SilencedBy) > 0 {
			return c.silenced(ctx, a.Status.SilencedBy), nil
		}
		return reclaim.AlertCheck{Status: reclaim.AlertSilenced, Reason: "inhibited by " + strings.Join(a.Status.InhibitedBy, ", ")}, nil
	}
	return reclaim.AlertCheck{Status: reclaim.AlertGone}, nil
}

// silenced describes the silences that mute an alert, and when the last ends.
func (c *Client) silenced(ctx context.Context, ids []string) reclaim.AlertCheck {
	chk := reclaim.AlertCheck{Status: reclaim.AlertSilenced}
	var reasons []string
	for _, id := range ids {
		resp, err := c.api.Silence.GetSilence(silence.NewGetSilenceParamsWithContext(ctx).WithSilenceID(strfmt.UUID(id)))
		if err != nil || resp.Payload == nil {
			reasons = append(reasons, "silence "+id)
			continue
		}
		s := resp.Payload
		end := time.Time(*s.EndsAt)
		if end.After(chk.Until) {
			chk.Until = end
		}
		reasons = append(reasons, fmt.Sprintf("%s until %s (%s)", deref(s.CreatedBy), end.UTC().Format(time.RFC3339), deref(s.Comment)))
	}
	chk.Reason = strings.Join(reasons, "; ")
	return chk
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Silence mutes one target's alerts for the reclaimer and nothing else: it
// matches the alert's name, the unit and the owner, and the receiver label
// the reclaimer's route sets, so other receivers still see the alert.
type Silence struct {
	Target    reclaim.Target
	Receiver  map[string]string // extra matchers, e.g. {"reclaimer": "true"}
	CreatedBy string
	Comment   string
	Start     time.Time
	End       time.Time
}

// Matchers are the silence's matchers, exact and never regular expressions.
func (s Silence) Matchers() models.Matchers {
	pairs := [][2]string{{"alertname", s.Target.Alertname}, {names.LabelUUID, s.Target.UUID}}
	for _, kv := range [][2]string{{names.LabelNamespace, s.Target.Namespace}, {names.LabelPod, s.Target.Pod}, {names.LabelUser, s.Target.User}, {names.LabelSlurmJob, s.Target.SlurmJob}} {
		if kv[1] != "" {
			pairs = append(pairs, kv)
		}
	}
	for k, v := range s.Receiver {
		pairs = append(pairs, [2]string{k, v})
	}
	var out models.Matchers
	for _, p := range pairs {
		name, value, no, yes := p[0], p[1], false, true
		out = append(out, &models.Matcher{Name: &name, Value: &value, IsRegex: &no, IsEqual: &yes})
	}
	return out
}

// CreateSilence creates a silence and returns its id.
func (c *Client) CreateSilence(ctx context.Context, s Silence) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start, end := strfmt.DateTime(s.Start), strfmt.DateTime(s.End)
	ps := &models.PostableSilence{Silence: models.Silence{
		Matchers: s.Matchers(), StartsAt: &start, EndsAt: &end, CreatedBy: &s.CreatedBy, Comment: &s.Comment,
	}}
	resp, err := c.api.Silence.PostSilences(silence.NewPostSilencesParamsWithContext(ctx).WithSilence(ps))
	if err != nil {
		return "", fmt.Errorf("alertmanager: creating a silence: %w", err)
	}
	return resp.Payload.SilenceID, nil
}
