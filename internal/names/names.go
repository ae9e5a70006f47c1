// Package names holds the names more than one part of gpureclaim reads or
// writes, so that each lives in one place. It depends on nothing.
package names

// UnattributedUser is the owner user of the processes NVML lists on a unit
// that the exporter's /proc cannot place (no process attribution, or a PID
// namespace of its own): the unit is held, by someone unknown. It is not a
// valid Unix user name, so it never stands for a real one.
const UnattributedUser = "(unattributed)"
