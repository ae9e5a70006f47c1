package action

import (
	"errors"
	"syscall"
	"time"

	"github.com/gpureclaim/gpureclaim/internal/procfs"
)

// Signaler signals processes and says whether one still runs.
type Signaler interface {
	Signal(pid int, sig syscall.Signal) error
	// Alive says whether pid runs and started at start (not a reused PID).
	Alive(pid int, start time.Time) bool
}

// OS signals real processes and reads /proc.
type OS struct{ Proc *procfs.FS }

func (o OS) Signal(pid int, sig syscall.Signal) error {
	err := syscall.Kill(pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // exited already
	}
	return err
}

func (o OS) Alive(pid int, start time.Time) bool {
	p, err := o.Proc.Process(pid)
	if err != nil {
		return false
	}
	if isZombie(o, pid) {
		return false
	}
	return start.IsZero() || p.StartTime.Equal(start)
}

// isZombie says whether a process has exited but is not reaped yet: it holds
// no GPU any more.
func isZombie(o OS, pid int) bool {
	st, err := o.Proc.State(pid)
	return err == nil && st == 'Z'
}
