// Package slack tells owners on Slack that their GPU is idle, with
// snooze, keep and release-now buttons; the messages follow the story
// (snoozed, kept, reclaimed, cancelled) by updating in place.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"golang.org/x/time/rate"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Notifier sends the reclaimer's messages to Slack.
type Notifier struct {
	cfg        *config.Slack
	api        *slack.Client
	owners     reclaim.OwnerLookup
	limit      *rate.Limiter
	clock      func() time.Time
	log        *slog.Logger
	pricing    Pricing
	statusPage string
	snoozes    []time.Duration
	sleep      func(context.Context, time.Duration) error
}

var _ reclaim.Notifier = (*Notifier)(nil)

// Options configure a Notifier.
type Options struct {
	Config     *config.Slack
	Owners     reclaim.OwnerLookup // nil: pods have no owner contact
	Clock      func() time.Time
	Logger     *slog.Logger
	Pricing    Pricing
	StatusPage string
	// HTTP calls Slack's API (the slack section's proxy and TLS,
	// config.NewHTTPClient); nil: a plain client.
	HTTP *http.Client
}

// CallTimeout bounds one call to Slack's API.
const CallTimeout = 10 * time.Second

// New returns a notifier.
func New(o Options) *Notifier {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	hc := o.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: CallTimeout}
	}
	per := time.Minute / time.Duration(o.Config.MaxRequestsPerMinute)
	return &Notifier{
		cfg:        o.Config,
		api:        slack.New(o.Config.Token, slack.OptionAPIURL(strings.TrimRight(o.Config.APIURL, "/")+"/"), slack.OptionHTTPClient(hc)),
		owners:     o.Owners,
		limit:      rate.NewLimiter(rate.Every(per), 5),
		clock:      o.Clock,
		log:        o.Logger,
		pricing:    o.Pricing,
		statusPage: o.StatusPage,
		snoozes:    o.Config.SnoozeDurations(),
		sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		},
	}
}

func (n *Notifier) Name() string   { return "slack" }
func (n *Notifier) Blocking() bool { return n.cfg.MustDeliver() }

// How a Web API call is retried: a 429 after its Retry-After (within
// bounds), a 5xx or a network error after a wait that doubles from
// callBackoff; callAttempts tries in all, inside one send of the engine,
// which has its own retries.
const (
	callAttempts      = 4
	callBackoff       = 250 * time.Millisecond
	callRetryAfterMin = time.Second
	callRetryAfterMax = 30 * time.Second
)

// call runs one Web API call inside the rate limiter, retrying a 429 after
// its Retry-After and a 5xx or a network error with backoff.
func (n *Notifier) call(ctx context.Context, f func() error) error {
	var err error
	for attempt := range callAttempts {
		if err := n.limit.Wait(ctx); err != nil {
			return err
		}
		err = f()
		var rl *slack.RateLimitedError
		var sc slack.StatusCodeError
		var wait time.Duration
		switch {
		case err == nil:
			return nil
		case errors.As(err, &rl):
			wait = min(max(rl.RetryAfter, callRetryAfterMin), callRetryAfterMax)
		case errors.As(err, &sc) && sc.Code >= 500:
			wait = callBackoff << attempt
		case isNetwork(err):
			wait = callBackoff << attempt
		default:
			return err // a 4xx or a Slack error: a retry would not help
		}
		if attempt == callAttempts-1 {
			break
		}
		if err := n.sleep(ctx, wait); err != nil {
			return err
		}
	}
	return err
}

func isNetwork(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne)
}

var (
	slackUserID = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)
	emailAddr   = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
)

// owner resolves the target's owner to a Slack user id; "" when unknown.
func (n *Notifier) owner(ctx context.Context, t reclaim.Target) (string, error) {
	contact, err := reclaim.Contact(ctx, n.owners, t, n.cfg.Users, n.cfg.EmailDomain)
	if err != nil {
		return "", err
	}
	switch {
	case slackUserID.MatchString(contact):
		return contact, nil
	case emailAddr.MatchString(contact):
		var u *slack.User
		err := n.call(ctx, func() (err error) { u, err = n.api.GetUserByEmailContext(ctx, contact); return err })
		if err != nil {
			if strings.Contains(err.Error(), "users_not_found") {
				n.log.Info("no Slack user for the owner's e-mail", "email", contact, "owner", t.Holder())
				return "", nil
			}
			return "", fmt.Errorf("looking up %s on Slack: %w", contact, err)
		}
		return u.ID, nil
	}
	return "", nil
}

// MetadataEventType names the metadata every message of the reclaimer
// carries, with its idempotency key in the payload's "key".
const MetadataEventType = "gpureclaim_message"

// historyLookback is how many of a channel's newest messages are searched
// for one that may have been posted already.
const historyLookback = 100

// post sends blocks to a channel (or a user's DM) and returns the channel
// and the message's ts. The message carries its key in its metadata; when
// it may have gone already (again: an earlier attempt's record was lost,
// or this attempt's reply was), the channel's recent history is searched
// for the key first, and a message found is not posted twice.
func (n *Notifier) post(ctx context.Context, channel string, blocks []slack.Block, text, key string, again bool) (string, string, error) {
	var ch, ts string
	err := n.call(ctx, func() (err error) {
		if again && key != "" {
			if at, found := n.find(ctx, channel, key); found {
				ch, ts = channel, at
				return nil
			}
		}
		again = true // a retry of this call: the post may have gone
		opts := []slack.MsgOption{slack.MsgOptionBlocks(blocks...), slack.MsgOptionText(esc(text), false)}
		if key != "" {
			opts = append(opts, slack.MsgOptionMetadata(slack.SlackMetadata{EventType: MetadataEventType, EventPayload: map[string]any{"key": key}}))
		}
		ch, ts, err = n.api.PostMessageContext(ctx, channel, opts...)
		return err
	})
	return ch, ts, err
}

// find looks for a message with key among a channel's newest; a channel
// it cannot read (a name, not an id) has none.
func (n *Notifier) find(ctx context.Context, channel, key string) (string, bool) {
	h, err := n.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: channel, Limit: historyLookback, IncludeAllMetadata: true})
	if err != nil {
		n.log.Warn("cannot look for a message that may have been posted already: posting it", "channel", channel, "key", key, "err", err)
		return "", false
	}
	for _, m := range h.Messages {
		if m.Metadata.EventType == MetadataEventType && m.Metadata.EventPayload["key"] == key {
			return m.Timestamp, true
		}
	}
	return "", false
}

func (n *Notifier) dm(ctx context.Context, user string) (string, error) {
	var ch *slack.Channel
	err := n.call(ctx, func() (err error) {
		ch, _, _, err = n.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{user}})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("opening a DM with %s: %w", user, err)
	}
	return ch.ID, nil
}

// Send delivers a message: a warning or notice is posted to the owner (DM)
// and the namespace's channel, or the default channel when neither is
// known; later kinds update those messages in place.
func (n *Notifier) Send(ctx context.Context, m reclaim.Message, prev map[string]string) (map[string]string, []string, error) {
	now := n.clock()
	r := m.Reclaim
	if m.Kind == reclaim.MsgAdmin || r == nil {
		return n.admin(ctx, m)
	}
	switch m.Kind {
	case reclaim.MsgReport:
		return n.deliver(ctx, m, reportBlocks(m.Text))
	case reclaim.MsgWarning, reclaim.MsgNotice:
		blocks := Warning(r, now, n.pricing, n.statusPage, n.snoozes)
		if m.Kind == reclaim.MsgNotice {
			blocks = Notice(r, now, n.pricing, n.statusPage)
		}
		if m.Restated {
			updated, _, err := n.update(ctx, prev, blocks, m.Text)
			return nil, updated, err
		}
		return n.deliver(ctx, m, blocks)
	}
	blocks := Outcome(m.Kind, r, m.By, now, n.pricing, n.statusPage)
	updated, ok, err := n.update(ctx, prev, blocks, m.Text)
	if !ok {
		// Nothing to update (the warning went elsewhere): say it anew.
		return n.deliver(ctx, m, blocks)
	}
	switch m.Kind {
	case reclaim.MsgFailed, reclaim.MsgNotReleased, reclaim.MsgRestoreFailed:
		_, _, _ = n.admin(ctx, m)
	}
	return nil, updated, err
}

// reportBlocks show the weekly report's table as it is printed.
func reportBlocks(text string) []slack.Block {
	return []slack.Block{slack.NewSectionBlock(mrkdwn("```"+esc(text)+"```"), nil, nil)}
}

// update replaces the messages prev names; ok is false when it names none.
func (n *Notifier) update(ctx context.Context, prev map[string]string, blocks []slack.Block, text string) (updated []string, ok bool, err error) {
	var errs []error
	for k, ts := range prev {
		ch, isMsg := strings.CutPrefix(k, reclaim.MessageRefPrefix)
		if !isMsg {
			continue
		}
		ok = true
		err := n.call(ctx, func() error {
			_, _, _, err := n.api.UpdateMessageContext(ctx, ch, ts, slack.MsgOptionBlocks(blocks...), slack.MsgOptionText(esc(text), false))
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("updating %s/%s: %w", ch, ts, err))
			continue
		}
		updated = append(updated, ch)
	}
	return updated, ok, errors.Join(errs...)
}

// deliver posts to the owner and the namespace channel; if neither exists,
// to the default channel. It fails only if nothing was delivered.
func (n *Notifier) deliver(ctx context.Context, m reclaim.Message, blocks []slack.Block) (map[string]string, []string, error) {
	r, text := m.Reclaim, m.Text
	refs := map[string]string{}
	var where []string
	var errs []error
	owner, err := n.owner(ctx, r.Target)
	if err != nil {
		errs = append(errs, err)
	}
	if owner != "" {
		refs["owner"] = owner
		if ch, err := n.dm(ctx, owner); err != nil {
			errs = append(errs, err)
		} else if ch, ts, err := n.post(ctx, ch, blocks, text, m.Key, m.Again); err != nil {
			errs = append(errs, fmt.Errorf("posting to %s: %w", owner, err))
		} else {
			refs[reclaim.MessageRefPrefix+ch] = ts
			where = append(where, "slack DM "+owner)
		}
	}
	channels := []string{}
	if ch := n.cfg.NamespaceChannels[r.Target.Namespace]; ch != "" {
		channels = append(channels, ch)
	}
	if owner == "" && len(channels) == 0 && n.cfg.DefaultChannel != "" {
		channels = append(channels, n.cfg.DefaultChannel)
	}
	for _, c := range channels {
		ch, ts, err := n.post(ctx, c, blocks, text, m.Key, m.Again)
		if err != nil {
			errs = append(errs, fmt.Errorf("posting to %s: %w", c, err))
			continue
		}
		refs[reclaim.MessageRefPrefix+ch] = ts
		where = append(where, "slack "+c)
	}
	if len(where) == 0 {
		if len(errs) == 0 {
			errs = append(errs, fmt.Errorf("no Slack user or channel for %s: set a gpureclaim.io/owner annotation, a users entry or a default channel", r.Target.Holder()))
		}
		return nil, nil, errors.Join(errs...)
	}
	for _, err := range errs {
		n.log.Warn("part of a Slack delivery failed", "reclaim", r.ID, "err", err)
	}
	return refs, where, nil
}

func (n *Notifier) admin(ctx context.Context, m reclaim.Message) (map[string]string, []string, error) {
	ch := n.cfg.AdminChannel
	if ch == "" {
		ch = n.cfg.DefaultChannel
	}
	if ch == "" {
		return nil, []string{"none"}, nil // the log notifier has it
	}
	blocks := []slack.Block{slack.NewSectionBlock(mrkdwn(":rotating_light: "+esc(m.Text)), nil, nil)}
	if m.Kind == reclaim.MsgReport {
		blocks = reportBlocks(m.Text)
	}
	_, _, err := n.post(ctx, ch, blocks, m.Text, m.Key, m.Again)
	if err != nil {
		return nil, nil, err
	}
	return nil, []string{"slack " + ch}, nil
}
