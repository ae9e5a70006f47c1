package mig

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/stretchr/testify/require"
)

func TestProfileNamesMatchTheDevicePlugin(t *testing.T) {
	for _, tc := range []struct {
		name string
		dev  nvml.Device
		mem  uint64
		want []string
	}{
		{"A100-40GB", dgxa100.NewDevice(0), 40960 << 20, []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.10gb"}},
		{"H100-80GB", dgxh100.NewDevice(0), 81920 << 20, []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"}},
		{"H200-141GB", dgxh200.NewDevice(0), 144384 << 20, []string{"1g.18gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me", "1g.35gb"}},
		// NVML reports a real H100's 1g instance as 9856 MiB of 81559 MiB.
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range Profiles(tc.dev, tc.mem) {
				got = append(got, p.Name)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMemoryGBOnRealSizes(t *testing.T) {
	require.EqualValues(t, 10, MemoryGB(9856<<20, 81559<<20))
	require.EqualValues(t, 40, MemoryGB(40192<<20, 40960<<20))
	require.EqualValues(t, 0, MemoryGB(1, 0))
}
