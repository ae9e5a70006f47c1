package email_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/internal/testkit/mailtest"
	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/email"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaimtest"
)

// owners gives a pod's owner contact.
type owners map[string]string

func (o owners) Owner(_ context.Context, t reclaim.Target) (string, error) {
	return o[t.Namespace+"/"+t.Pod], nil
}

func warning(t reclaim.Target, text string) reclaim.Message {
	r := &reclaim.Reclaim{ID: "0123456789abcdef-1772445600", Target: t, Policy: "idle", Action: "kill"}
	return reclaim.Message{Kind: reclaim.MsgWarning, Reclaim: r, Text: text, Key: reclaim.MessageKey(r, reclaim.MsgWarning)}
}

func notifier(t *testing.T, srv *mailtest.Server, tls string, change func(*config.Email)) *email.Notifier {
	cfg := &config.Email{Smarthost: srv.SMTP, From: "gpureclaim@example.com", TLS: tls, CA: srv.CA, Username: "reclaimer", Password: "secret",
		Admins: []string{"gpu-admins@example.com"}, EmailDomain: "example.com"}
	if change != nil {
		change(cfg)
	}
	n, err := email.New(email.Options{Config: cfg, Owners: owners{"ml/nb-0": "carol@example.com", "ml/slack": "U0CAROL"}, Clock: func() time.Time { return reclaimtest.T0 },
		StatusPage: "https://reclaimer.example.com"})
	require.NoError(t, err)
	return n
}

// Over STARTTLS with auth, to a real SMTP server: the owner gets the
// warning in text and HTML; what a label or a description carries is text
// in the HTML and never a header; a message sent again has the same
// Message-ID; the admins get what has no owner address.
func TestSTARTTLS(t *testing.T) {
	srv := mailtest.Start(t, mailtest.STARTTLS)
	n := notifier(t, srv, config.EmailSTARTTLS, nil)
	ctx := context.Background()
	bare := reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-1", Node: "n1\r\nBcc: mallory@example.com", Kind: "gpu", User: "bob"}
	text := `GPU GPU-1 held by bob: <@U0ADMIN> <!here> <a href="https://evil.example.com">click</a> has been idle.`
	_, where, err := n.Send(ctx, warning(bare, text), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"email bob@example.com"}, where)
	_, _, err = n.Send(ctx, warning(bare, text), nil)
	require.NoError(t, err, "sent again after a lost reply")

	msgs := srv.Messages(t)
	require.Len(t, msgs, 2)
	m := msgs[0]
	require.Equal(t, "bob@example.com", m.To[0].Address)
	require.Equal(t, "gpureclaim@example.com", m.From.Address)
	require.Empty(t, m.Bcc, "a label cannot add a header")
	require.True(t, strings.HasPrefix(m.Subject, "Idle GPU: it will be reclaimed: GPU GPU-1 on n1"), m.Subject)
	require.Contains(t, m.Text, `<@U0ADMIN> <!here>`, "plain text is the text")
	require.Contains(t, m.HTML, `&lt;@U0ADMIN&gt; &lt;!here&gt; &lt;a href=&#34;https://evil.example.com&#34;&gt;click&lt;/a&gt;`, "HTML escapes it")
	require.NotContains(t, m.HTML, `<a href="https://evil.example.com">`)
	require.Contains(t, m.HTML, `<a href="https://reclaimer.example.com">`)
	require.Equal(t, msgs[0].MessageID, msgs[1].MessageID, "the same message, to the reader's client")

	pod := reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-2", Node: "n1", Kind: "gpu", Namespace: "ml", Pod: "nb-0"}
	_, where, err = n.Send(ctx, warning(pod, "idle"), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"email carol@example.com"}, where, "the pod's owner annotation")
	slackOnly := reclaim.Target{Alertname: "GPUIdle", UUID: "GPU-3", Node: "n1", Kind: "gpu", Namespace: "ml", Pod: "slack"}
	_, where, err = n.Send(ctx, warning(slackOnly, "idle"), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"email gpu-admins@example.com"}, where, "no owner address: the admins")
}

// TLS from the first byte (port 465's way).
func TestImplicitTLS(t *testing.T) {
	srv := mailtest.Start(t, mailtest.Implicit)
	n := notifier(t, srv, config.EmailTLS, nil)
	_, _, err := n.Send(context.Background(), warning(reclaim.Target{UUID: "GPU-1", Node: "n1", Kind: "gpu", User: "bob"}, "idle"), nil)
	require.NoError(t, err)
	require.Len(t, srv.Messages(t), 1)
}

// A server that offers no STARTTLS, or whose certificate the configured CA
// did not sign, gets nothing: no mail and no password in the clear.
func TestNothingInTheClear(t *testing.T) {
	plain := mailtest.Start(t, mailtest.Plain)
	n := notifier(t, plain, config.EmailSTARTTLS, nil)
	_, _, err := n.Send(context.Background(), warning(reclaim.Target{UUID: "GPU-1", Node: "n1", Kind: "gpu", User: "bob"}, "idle"), nil)
	require.ErrorContains(t, err, "offers no STARTTLS")
	require.Empty(t, plain.Messages(t))

	tlsSrv := mailtest.Start(t, mailtest.STARTTLS)
	other := mailtest.Start(t, mailtest.STARTTLS) // another CA
	n = notifier(t, tlsSrv, config.EmailSTARTTLS, func(c *config.Email) { c.CA = other.CA })
	_, _, err = n.Send(context.Background(), warning(reclaim.Target{UUID: "GPU-1", Node: "n1", Kind: "gpu", User: "bob"}, "idle"), nil)
	require.ErrorContains(t, err, "certificate")
	require.Empty(t, tlsSrv.Messages(t))
}
