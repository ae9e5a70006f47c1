package packing

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The sizing profiles of an H100 80GB, named as the device plugin names them.
func TestProfiles(t *testing.T) {
	var names []string
	for _, p := range Profiles(Models["H100-80GB"]) {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, names)
	c, ok := ModelOf("NVIDIA H100 80GB HBM3")
	require.True(t, ok)
	require.Equal(t, Models["H100-80GB"].Name, c.Name)
}
