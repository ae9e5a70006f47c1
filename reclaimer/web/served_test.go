package web

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpureclaim/gpureclaim/reclaimer/reclaim"
)

// The API answers the public record without the notifiers' references to
// their messages, and leaves the engine's record as it was.
func TestServedWithoutNotifierRefs(t *testing.T) {
	r := &reclaim.Reclaim{ID: "fp-1", State: reclaim.Done,
		Warning: reclaim.Delivery{Sent: true, Refs: map[string]string{"slack.owner": "U1", "slack.msg.D1": "1.2"}, Channels: []string{"D1"}},
		Final:   reclaim.Delivery{Sent: true, Refs: map[string]string{"slack.sent.reclaimed": "1"}}}
	g := served(r)
	require.Empty(t, g.Status.Warning.Refs)
	require.Empty(t, g.Status.Final.Refs)
	require.Equal(t, []string{"D1"}, g.Status.Warning.Channels, "where it went stays")
	require.Equal(t, "U1", r.Warning.Refs["slack.owner"], "the engine's record is untouched")
}
