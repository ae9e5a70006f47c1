package sampler

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/gpureclaim/gpureclaim/internal/podresources"
)

// draKey is a unit as NVIDIA's DRA driver names it: a whole GPU by its
// minor number (gpu-<minor>, not the NVML index), a MIG device by its
// parent's minor number, its GPU instance profile id and where its
// placement starts (gpu-<minor>-mig-<profile>-<profile id>-<start>). The
// names hold for MIG devices the driver creates on demand too: NVML tells
// the exporter all three numbers of each instance it finds.
type draKey struct {
	minor, profile, start int
	mig                   bool
}

var (
	draGPUName = regexp.MustCompile(`^gpu-(\d+)$`)
	draMIGName = regexp.MustCompile(`^gpu-(\d+)-mig-.+-(\d+)-(\d+)$`)
)

// parseDRAName reads a device name of NVIDIA's DRA driver.
func parseDRAName(name string) (draKey, bool) {
	if m := draGPUName.FindStringSubmatch(name); m != nil {
		minor, _ := strconv.Atoi(m[1])
		return draKey{minor: minor}, true
	}
	if m := draMIGName.FindStringSubmatch(name); m != nil {
		minor, _ := strconv.Atoi(m[1])
		profile, _ := strconv.Atoi(m[2])
		start, _ := strconv.Atoi(m[3])
		return draKey{minor: minor, profile: profile, start: start, mig: true}, true
	}
	return draKey{}, false
}

// unitDRAKey is the name NVIDIA's DRA driver gives a unit, when NVML told
// the numbers it is made of.
func unitDRAKey(g *GPU, u *Unit) (draKey, bool) {
	if g.Minor < 0 {
		return draKey{}, false
	}
	if u.MIG == nil {
		return draKey{minor: g.Minor}, true
	}
	if u.MIG.ProfileID < 0 || u.MIG.PlacementStart < 0 {
		return draKey{}, false
	}
	return draKey{minor: g.Minor, profile: u.MIG.ProfileID, start: u.MIG.PlacementStart, mig: true}, true
}

// draHolders maps the kubelet's DRA devices to the units they name. A
// name that does not follow the driver's convention is looked up in the
// node's ResourceSlices, where they are read (the device's uuid
// attribute); one that cannot be resolved holds no unit the exporter can
// tell, and is logged once.
func (c *cycle) draHolders() {
	c.dra, c.draByUUID = map[draKey][]podresources.Container{}, map[string][]podresources.Container{}
	c.draDevices, c.draUnresolved = map[draKey][]podresources.Device{}, 0
	for d, holders := range c.s.allocs.Devices {
		if k, ok := parseDRAName(d.Name); ok {
			c.dra[k] = append(c.dra[k], holders...)
			c.draDevices[k] = append(c.draDevices[k], d)
			continue
		}
		uuid, why := c.sliceUUID(d)
		if uuid != "" {
			c.draByUUID[uuid] = append(c.draByUUID[uuid], holders...)
			continue
		}
		c.draUnresolved++
		if cause := fmt.Sprintf("%s/%s/%s", d.Driver, d.Name, why); !c.s.causes[cause] {
			c.s.causes[cause] = true
			c.s.cfg.Logger.Warn("a DRA device's name does not follow its driver's convention (gpu-<minor>, gpu-<minor>-mig-<profile>-<profile id>-<start>), and "+why+": its holders are not attributed to a unit",
				"driver", d.Driver, "pool", d.Pool, "device", d.Name, "holders", len(holders))
		}
	}
}

// draLeftOver counts the DRA devices named by the driver's convention that
// no unit of this sample matched (no GPU of that minor number, a MIG
// instance NVML could not read), and logs each once: their holders are
// not attributed.
func (c *cycle) draLeftOver() int {
	n := c.draUnresolved
	for k, devices := range c.draDevices {
		if c.draUsed[k] {
			continue
		}
		n += len(devices)
		for _, d := range devices {
			if cause := "no unit/" + d.Driver + "/" + d.Pool + "/" + d.Name; !c.s.causes[cause] {
				c.s.causes[cause] = true
				c.s.cfg.Logger.Warn("a DRA device the kubelet reports allocated names no unit of this node (no GPU of that minor number, or a MIG instance NVML cannot read): its holders are not attributed",
					"driver", d.Driver, "pool", d.Pool, "device", d.Name, "holders", len(c.dra[k]))
			}
		}
	}
	return n
}

// sliceUUID is the UUID a device publishes in the node's ResourceSlices,
// read again at most every SliceInterval while a name is unknown; else
// why it is not known.
func (c *cycle) sliceUUID(d podresources.Device) (uuid, why string) {
	if c.s.cfg.Slices == nil {
		return "", "ResourceSlices are not read (--kubernetes.resource-slices)"
	}
	if _, ok := c.s.sliceUUIDs[d]; !ok && (c.s.slicesRead.IsZero() || c.now.Sub(c.s.slicesRead) >= c.s.cfg.SliceInterval) {
		c.s.slicesRead = c.now
		m, err := c.s.cfg.Slices.DeviceUUIDs(c.ctx)
		if err != nil {
			c.s.cfg.Logger.Warn("reading the node's ResourceSlices", "err", err)
		} else {
			c.s.sliceUUIDs = m
		}
	}
	if uuid := c.s.sliceUUIDs[d]; uuid != "" {
		return uuid, ""
	}
	return "", "its ResourceSlice gives it no uuid attribute"
}
