package slack

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/names"

	"github.com/slack-go/slack"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Button action ids. A snooze button's id says how long: snooze_<seconds>.
const (
	ActionSnooze1h = "snooze_3600"
	ActionKeep     = "keep"
	ActionRelease  = "release"
	ActionRestore  = "restore"
)

// DefaultSnoozes are the snooze buttons: 1 h, 4 h, 24 h.
var DefaultSnoozes = []time.Duration{time.Hour, 4 * time.Hour, 24 * time.Hour}

func snoozeAction(d time.Duration) string { return fmt.Sprintf("snooze_%d", int(d.Seconds())) }

// snoozeLabel names a duration the way people say it: 1 h, 30 min, 8 s.
func snoozeLabel(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("Snooze %d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("Snooze %d min", d/time.Minute)
	}
	return fmt.Sprintf("Snooze %d s", int(d.Seconds()))
}

// date is Slack's date formatting: each reader sees their own time zone.
func date(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>", t.Unix(), t.UTC().Format("2006-01-02 15:04 UTC"))
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}
func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, true, false)
}

// Pricing turns GPU time into money for the message.
type Pricing struct {
	PerGPUHour float64
	Currency   string
}

func (p Pricing) cost(hours float64) string {
	return fmt.Sprintf("%.2f %s", hours*p.PerGPUHour, p.Currency)
}

const restoreHint = " (you can restore it from here)"

var actionWords = map[config.Action]string{
	"kill":       "its processes will be ended (SIGTERM, then SIGKILL after a checkpoint grace)",
	"evict":      "the pod will be evicted",
	"scale_down": "its workload will be scaled down" + restoreHint,
	"stop":       "its workload will be stopped" + restoreHint,
	"notify":     "nothing will be done",
}

// whatHappens says what the action does, naming the top owner it stops.
func whatHappens(r *reclaim.Reclaim) string {
	if c := r.TopOwner; c != nil && c.Kind != "" && (r.Action == config.ActionStop || r.Action == config.ActionScaleDown) {
		verb := c.Stopped
		if r.Action == config.ActionScaleDown {
			verb = "scaled down"
		}
		return fmt.Sprintf("%s will be %s%s", code(esc(c.String())), esc(verb), restoreHint)
	}
	return actionWords[r.Action]
}

func code(s string) string { return "`" + s + "`" }

// esc escapes text for Slack's mrkdwn: what an alert, a reason or a label
// carries never becomes a mention (<!channel>), a link or markup.
var esc = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace

// slackUser is a mention of one Slack user, as the reclaimer writes who
// pressed a button.
var slackUser = regexp.MustCompile(`^<@[UW][A-Z0-9]+>$`)

// mention is who did something: a Slack user's mention as it is, any other
// name escaped.
func mention(by string) string {
	if slackUser.MatchString(by) {
		return by
	}
	return esc(by)
}

// safeURL returns an http(s) URL fit for a mrkdwn link, or "".
func safeURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(s, "<>| \t\n") {
		return ""
	}
	return s
}

func holder(t reclaim.Target) string {
	if t.Pod != "" {
		return fmt.Sprintf("pod `%s/%s`", esc(t.Namespace), esc(t.Pod))
	}
	if t.SlurmJob != "" {
		return fmt.Sprintf("user `%s`, Slurm job `%s`", esc(t.User), esc(t.SlurmJob))
	}
	return fmt.Sprintf("user `%s`", esc(t.User))
}

func unit(t reclaim.Target) string {
	if t.Kind == names.KindMIG {
		return fmt.Sprintf("MIG %s slice `%s`", esc(t.MIGProfile), esc(t.UUID))
	}
	return fmt.Sprintf("GPU `%s`", esc(t.UUID))
}

// facts is the section every message about a reclaim starts with.
func facts(r *reclaim.Reclaim, now time.Time, p Pricing) slack.Block {
	t := r.Target
	idle := r.IdleSince()
	hours := now.Sub(idle).Hours() * t.Size()
	return slack.NewSectionBlock(nil, []*slack.TextBlockObject{
		mrkdwn("*Held by*\n" + holder(t)),
		mrkdwn("*Unit*\n" + unit(t) + " on `" + esc(t.Node) + "`"),
		mrkdwn("*Idle since*\n" + date(idle)),
		mrkdwn(fmt.Sprintf("*Idle so far*\n%.1f GPU-hours, about %s", hours, p.cost(hours))),
	}, nil)
}

func links(r *reclaim.Reclaim, statusPage string) slack.Block {
	parts := []string{fmt.Sprintf("Policy `%s`", esc(r.Policy)), fmt.Sprintf("reclaim `%s`", esc(r.ID))}
	if u := safeURL(r.Annotations.Get("dashboard_url")); u != "" {
		parts = append(parts, fmt.Sprintf("<%s|dashboard>", u))
	}
	if u := safeURL(strings.TrimRight(statusPage, "/") + "/"); statusPage != "" && u != "" {
		parts = append(parts, fmt.Sprintf("<%s|status page>", u))
	}
	return slack.NewContextBlock("", mrkdwn(strings.Join(parts, " · ")))
}

func button(action, label, value string) *slack.ButtonBlockElement {
	return slack.NewButtonBlockElement(action, value, plain(label))
}

// Warning is the message that tells the owner their unit is idle and what
// will happen when, with the buttons.
func Warning(r *reclaim.Reclaim, now time.Time, p Pricing, statusPage string, snoozes []time.Duration) []slack.Block {
	release := button(ActionRelease, "Release now", r.ID).WithStyle(slack.StyleDanger)
	release.Confirm = slack.NewConfirmationBlockObject(plain("Release the GPU now?"),
		mrkdwn(fmt.Sprintf("%s: %s now. Unsaved work is lost.", unit(r.Target), strings.TrimPrefix(strings.TrimSuffix(whatHappens(r), restoreHint), "its "))), plain("Release now"), plain("Cancel"))
	release.Confirm.WithStyle(slack.StyleDanger)
	var buttons []slack.BlockElement
	for _, d := range snoozes {
		buttons = append(buttons, button(snoozeAction(d), snoozeLabel(d), r.ID))
	}
	buttons = append(buttons, button(ActionKeep, "Keep", r.ID).WithStyle(slack.StylePrimary), release)
	return []slack.Block{
		slack.NewHeaderBlock(plain("Idle GPU: it will be reclaimed")),
		facts(r, now, p),
		slack.NewSectionBlock(mrkdwn(fmt.Sprintf("*What happens* — unless the GPU is used again, %s on %s.", whatHappens(r), date(r.ActAt))), nil, nil),
		slack.NewActionBlock("gpureclaim", buttons...),
		links(r, statusPage),
	}
}

// Notice tells the owner about an underused, oversized or overcommitted unit.
func Notice(r *reclaim.Reclaim, now time.Time, p Pricing, statusPage string) []slack.Block {
	title := map[string]string{names.AlertWasted: "Underused GPU", names.AlertMIGOversized: "Oversized MIG slice", names.AlertOvercommitted: "Overcommitted GPU", names.AlertPackable: "GPU that could be shared"}[r.Target.Alertname]
	if title == "" {
		title = r.Target.Alertname
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(title)),
		slack.NewSectionBlock(mrkdwn(esc(r.Annotations.Get("description"))), nil, nil),
	}
	if r.TopOwner != nil && r.Reason != "" {
		// Decided on the pod's top owner: say why nothing will be done.
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn("*Why nothing will be done* — "+esc(r.Reason)+"."), nil, nil))
	}
	return append(blocks, links(r, statusPage))
}

// Outcome replaces the warning once the story moves on: snoozed, kept,
// released, reclaimed, cancelled, failed, restored.
func Outcome(kind reclaim.MessageKind, r *reclaim.Reclaim, by string, now time.Time, p Pricing, statusPage string) []slack.Block {
	var head, body string
	var actions []slack.BlockElement
	by = mention(by)
	switch kind {
	case reclaim.MsgSnoozed:
		head = "Snoozed"
		var until time.Time
		if r.Snooze != nil {
			until = r.Snooze.Until
		}
		body = fmt.Sprintf("Snoozed by %s until %s. If the GPU is still idle then, you will be warned again.", by, date(until))
		actions = []slack.BlockElement{button(ActionKeep, "Keep", r.ID)}
	case reclaim.MsgKept:
		head = "Kept"
		body = fmt.Sprintf("Kept by %s until the workload ends. gpureclaim will not reclaim it.", by)
	case reclaim.MsgReleased:
		head = "Released"
		body = fmt.Sprintf("Released by %s: reclaiming now.", by)
	case reclaim.MsgReclaimed:
		head = "Reclaimed"
		body = fmt.Sprintf("Reclaimed on %s: %s.", date(r.ActedAt), esc(r.Detail))
		if w := r.Stopped; w != nil && r.Restore == nil {
			if w.Stop == reclaim.StopScale || w.Stop == "" {
				body += fmt.Sprintf(" %s `%s` had %d replicas.", w.Kind, w.Name, w.PreviousReplicas)
			}
			actions = []slack.BlockElement{button(ActionRestore, "Restore", r.ID).WithStyle(slack.StylePrimary)}
		}
	case reclaim.MsgRestored:
		head = "Restored"
		body = fmt.Sprintf("Restored by %s: %s; it runs again.", by, esc(r.Stopped.RestoredText()))
	case reclaim.MsgRestoreFailed:
		head = "Restore failed"
		body = "The restore asked by " + by + " did not take: " + esc(r.Restore.Failed) + ". The admins are told."
	case reclaim.MsgNotReleased:
		head = "GPU not released"
		body = "The GPU was not released: " + esc(r.Reason) + ". The admins are told."
	case reclaim.MsgCancelled:
		head = "Cancelled"
		body = "Cancelled: " + esc(r.Reason) + "."
		if strings.Contains(r.Reason, "no longer fires") || strings.Contains(r.Reason, "resolved") {
			body = "Cancelled: the GPU is busy again."
		}
	case reclaim.MsgFailed:
		head = "Reclaim failed"
		body = "The reclaim failed: " + esc(r.Reason) + ". The admins are told."
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(head)),
		facts(r, now, p),
		slack.NewSectionBlock(mrkdwn(body), nil, nil),
	}
	if len(actions) > 0 {
		blocks = append(blocks, slack.NewActionBlock("gpureclaim", actions...))
	}
	return append(blocks, links(r, statusPage))
}
