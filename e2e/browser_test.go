package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// statusPage loads the reclaimer's status page in headless Chromium while a
// reclaim is pending, and checks that it shows it with a running countdown.
// The reclaim's grace outlasts the suite, so however long Chromium takes to
// start on a busy machine, it is still pending when the page loads.
func (su *suite) statusPage(t *testing.T, chromium string) {
	pending := su.waitState("viewer", pod("browsed", "viewer"), "pending", 90*time.Second)
	require.Eventually(t, func() bool {
		r, _ := su.reclaimOf(func(x *reclaim.Reclaim) bool { return x.ID == pending.ID })
		return r.Warning.Sent
	}, 30*time.Second, 100*time.Millisecond)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancel = context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	err := chromedp.Do(bctx,
		chromedp.Navigate(su.s.ReclaimerURL+"/"),
		chromedp.WaitVisible(`#pending`),
		chromedp.Sleep(1500*time.Millisecond), // the countdown ticks every second
	)
	require.NoError(t, err)
	table, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#pending').innerText`))
	require.NoError(t, err)
	countdown, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('tr[data-reclaim="`+pending.ID+`"] .countdown').innerText`))
	require.NoError(t, err)
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // 100: a PNG
	require.NoError(t, err)
	require.Contains(t, table, "browsed/viewer")
	require.Contains(t, table, "evict")
	require.Regexp(t, regexp.MustCompile(`^(\d+m )?\d+s$|^due now$`), countdown, "the page's script counts down to the action")
	path := filepath.Join(su.out, "status-page.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("screenshot: %s (countdown %q)", path, countdown)
}
