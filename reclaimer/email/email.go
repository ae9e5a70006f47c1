// Package email tells owners and admins by e-mail, over SMTP with
// STARTTLS or TLS: a plain-text and an HTML part, the HTML escaped so that
// nothing an alert carries becomes markup or a link, and a Message-ID made
// from the message's idempotency key, so that a message sent again (a retry
// after a lost reply) is the same message to the reader's client.
package email

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/smtp"
	"net/textproto"
	"regexp"
	"strings"
	"time"

	"github.com/gpureclaim/gpureclaim/reclaimer/config"
	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// Notifier sends the reclaimer's messages by e-mail.
type Notifier struct {
	cfg        *config.Email
	owners     reclaim.OwnerLookup
	clock      func() time.Time
	log        *slog.Logger
	statusPage string
	roots      *x509.CertPool // nil: the system's
	// timeout bounds one message's whole SMTP conversation.
	timeout time.Duration
}

var _ reclaim.Notifier = (*Notifier)(nil)

// Options configure a Notifier.
type Options struct {
	Config *config.Email
	Owners reclaim.OwnerLookup // nil: pods have no owner address
	Clock  func() time.Time
	Logger *slog.Logger
	// StatusPage is status_page_url, which the config takes only as an
	// http(s) URL.
	StatusPage string
}

// New returns a notifier.
func New(o Options) (*Notifier, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{cfg: o.Config, owners: o.Owners, clock: o.Clock, log: o.Logger, statusPage: o.StatusPage, timeout: 30 * time.Second}
	if len(o.Config.CA) > 0 {
		n.roots = x509.NewCertPool()
		if !n.roots.AppendCertsFromPEM(o.Config.CA) {
			return nil, errors.New("email.ca_file: no PEM certificate in it")
		}
	}
	return n, nil
}

func (n *Notifier) Name() string { return "email" }

// Blocking: a reclaim does not wait for an e-mail; Slack or the webhook
// is the channel that must deliver, when there is one.
func (n *Notifier) Blocking() bool { return false }

var address = regexp.MustCompile(`^[^@\s<>,"]+@[^@\s<>,"]+\.[^@\s<>,"]+$`)

// Send mails a message to the owner, or the admins when the owner has no
// address (and for admin messages).
func (n *Notifier) Send(ctx context.Context, m reclaim.Message, _ map[string]string) (map[string]string, []string, error) {
	var to []string
	if m.Reclaim != nil && m.Kind != reclaim.MsgAdmin {
		owner, err := n.owner(ctx, m.Reclaim.Target)
		if err != nil {
			n.log.Warn("looking up the owner's address: telling the admins", "reclaim", m.Reclaim.ID, "err", err)
		}
		if owner != "" {
			to = []string{owner}
		}
	}
	if len(to) == 0 {
		to = n.cfg.Admins
	}
	if len(to) == 0 {
		return nil, []string{"none"}, nil // no address: the log notifier has it
	}
	msg, err := n.compose(m, to)
	if err != nil {
		return nil, nil, err
	}
	if err := n.deliver(ctx, to, msg); err != nil {
		return nil, nil, err
	}
	where := make([]string, len(to))
	for i, a := range to {
		where[i] = "email " + a
	}
	return nil, where, nil
}

// owner is the address of the target's owner, or "".
func (n *Notifier) owner(ctx context.Context, t reclaim.Target) (string, error) {
	contact, err := reclaim.Contact(ctx, n.owners, t, n.cfg.Users, n.cfg.EmailDomain)
	if err != nil || !address.MatchString(contact) {
		return "", err // a Slack id, or nothing
	}
	return contact, nil
}

var subjects = map[reclaim.MessageKind]string{
	reclaim.MsgWarning:       "Idle GPU: it will be reclaimed",
	reclaim.MsgNotice:        "GPU held but not used",
	reclaim.MsgReclaimed:     "Idle GPU reclaimed",
	reclaim.MsgNotReleased:   "GPU not released",
	reclaim.MsgCancelled:     "GPU reclaim cancelled",
	reclaim.MsgFailed:        "GPU reclaim failed",
	reclaim.MsgSnoozed:       "GPU reclaim snoozed",
	reclaim.MsgKept:          "GPU kept",
	reclaim.MsgReleased:      "GPU released by its owner",
	reclaim.MsgRestored:      "Workload restored",
	reclaim.MsgRestoreFailed: "Restore failed",
	reclaim.MsgAdmin:         "gpureclaim: for the admins",
	reclaim.MsgReport:        "gpureclaim: the week's idle GPUs",
}

var page = template.Must(template.New("mail").Parse(`<!DOCTYPE html>
<html><body>
<h2>{{.Subject}}</h2>
<p>{{.Text}}</p>
{{if .StatusPage}}<p><a href="{{.StatusPage}}">The reclaimer's status page</a></p>{{end}}
</body></html>
`))

// compose writes the message: headers, a plain-text part and an HTML part.
func (n *Notifier) compose(m reclaim.Message, to []string) ([]byte, error) {
	subject := subjects[m.Kind]
	if subject == "" {
		subject = "gpureclaim: " + string(m.Kind)
	}
	if m.Reclaim != nil {
		subject += ": " + m.Reclaim.Target.Unit()
	}
	var b bytes.Buffer
	h := textproto.MIMEHeader{}
	h.Set("From", n.cfg.From)
	h.Set("To", strings.Join(to, ", "))
	// Q-encoded: a value can bring no line break, so no header of its own.
	h.Set("Subject", mime.QEncoding.Encode("utf-8", oneLine(subject)))
	h.Set("Date", n.clock().UTC().Format(time.RFC1123Z))
	h.Set("MIME-Version", "1.0")
	if m.Key != "" {
		sum := sha256.Sum256([]byte(m.Key))
		h.Set("Message-ID", "<"+hex.EncodeToString(sum[:16])+"@gpureclaim>")
	}
	mw := multipart.NewWriter(&b)
	h.Set("Content-Type", "multipart/alternative; boundary="+mw.Boundary())
	for _, k := range []string{"From", "To", "Subject", "Date", "MIME-Version", "Message-ID", "Content-Type"} {
		if v := h.Get(k); v != "" {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	var html bytes.Buffer
	if err := page.Execute(&html, map[string]string{"Subject": subject, "Text": m.Text, "StatusPage": n.statusPage}); err != nil {
		return nil, err
	}
	for _, part := range []struct{ kind, body string }{{"text/plain", m.Text + "\n"}, {"text/html", html.String()}} {
		w, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {part.kind + "; charset=utf-8"}, "Content-Transfer-Encoding": {"quoted-printable"}})
		if err != nil {
			return nil, err
		}
		qp := quotedprintable.NewWriter(w)
		if _, err := qp.Write([]byte(part.body)); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// deliver runs one SMTP conversation.
func (n *Notifier) deliver(ctx context.Context, to []string, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	host, _, err := net.SplitHostPort(n.cfg.Smarthost)
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{ServerName: host, RootCAs: n.roots, MinVersion: tls.VersionTLS12}
	var conn net.Conn
	d := &net.Dialer{}
	if n.cfg.TLS == config.EmailTLS {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tlsConfig}).DialContext(ctx, "tcp", n.cfg.Smarthost)
	} else {
		conn, err = d.DialContext(ctx, "tcp", n.cfg.Smarthost)
	}
	if err != nil {
		return fmt.Errorf("smtp %s: %w", n.cfg.Smarthost, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp %s: %w", n.cfg.Smarthost, err)
	}
	defer c.Close()
	if n.cfg.TLS == config.EmailSTARTTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return fmt.Errorf("smtp %s offers no STARTTLS: nothing is sent in the clear (email.tls)", n.cfg.Smarthost)
		}
		if err := c.StartTLS(tlsConfig); err != nil {
			return fmt.Errorf("smtp %s: STARTTLS: %w", n.cfg.Smarthost, err)
		}
	}
	if n.cfg.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", n.cfg.Username, n.cfg.Password, host)); err != nil {
			return fmt.Errorf("smtp %s: auth: %w", n.cfg.Smarthost, err)
		}
	}
	if err := c.Mail(n.cfg.From); err != nil {
		return fmt.Errorf("smtp %s: MAIL FROM: %w", n.cfg.Smarthost, err)
	}
	for _, a := range to {
		if err := c.Rcpt(a); err != nil {
			return fmt.Errorf("smtp %s: RCPT TO %s: %w", n.cfg.Smarthost, a, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp %s: DATA: %w", n.cfg.Smarthost, err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("smtp %s: %w", n.cfg.Smarthost, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp %s: the message was refused: %w", n.cfg.Smarthost, err)
	}
	return c.Quit()
}
