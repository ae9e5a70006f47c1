// Package procfs reads what the exporter needs to know of a process from
// /proc: who runs it, which pod or Slurm job its cgroup belongs to, and when
// it started. The root is configurable so that a container can read the
// host's /proc and tests can read a simulated one.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Process is what /proc says of one process.
type Process struct {
	PID  int
	Name string // comm, from status
	UID  int
	User string // from the passwd file; the uid as text when unknown
	// PodUID and ContainerID are set for a process in a Kubernetes pod.
	PodUID, ContainerID string
	// SlurmJob is set for a process in a Slurm job's cgroup.
	SlurmJob string
	// StartTime is when the process started (its start in ticks after boot).
	StartTime time.Time
}

// FS reads a /proc tree and a passwd file.
type FS struct {
	root      string
	passwd    string
	clockTick int64

	mu       sync.Mutex
	bootTime time.Time
	users    map[int]string
	usersMod time.Time
}

// New reads /proc at root, users from passwd (may be empty: uids then stay numeric).
func New(root, passwd string) *FS {
	return &FS{root: root, passwd: passwd, clockTick: 100}
}

// ErrNoProcess is returned for a PID that has no /proc entry (it exited).
var ErrNoProcess = errors.New("no such process")

// Process reads one process.
func (fs *FS) Process(pid int) (Process, error) {
	dir := filepath.Join(fs.root, strconv.Itoa(pid))
	p := Process{PID: pid, UID: -1}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if errors.Is(err, os.ErrNotExist) {
		return p, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	if err != nil {
		return p, err
	}
	for line := range bytes.SplitSeq(status, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch string(k) {
		case "Name":
			p.Name = string(bytes.TrimSpace(v))
		case "Uid":
			if f := bytes.Fields(v); len(f) > 0 {
				p.UID, _ = strconv.Atoi(string(f[0])) // the real uid
			}
		}
	}
	if p.UID < 0 {
		return p, fmt.Errorf("pid %d: status has no Uid line", pid)
	}
	p.User = fs.userName(p.UID)

	cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return p, err
	}
	p.PodUID, p.ContainerID, p.SlurmJob = ParseCgroup(string(cg))

	if t, err := fs.startTime(dir); err == nil {
		p.StartTime = t
	}
	return p, nil
}

var (
	// kubepods-burstable-pod<uid>.slice (systemd driver, '_' for '-'),
	// kubepods/burstable/pod<uid>/ (cgroupfs driver).
	podUIDRe = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
	// cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope, or a bare <id> path element.
	containerRe = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$`)
	slurmJobRe  = regexp.MustCompile(`/job_([0-9]+)(?:/|$)`)
)

// ParseCgroup finds the pod UID and container ID, or the Slurm job id, in
// the contents of /proc/<pid>/cgroup (v1 or v2).
func ParseCgroup(s string) (podUID, containerID, slurmJob string) {
	for line := range strings.SplitSeq(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		path := parts[2]
		if m := podUIDRe.FindStringSubmatch(path); m != nil && podUID == "" {
			podUID = strings.ReplaceAll(m[1], "_", "-")
			if c := containerRe.FindStringSubmatch(path); c != nil {
				containerID = c[1]
			}
		}
		if m := slurmJobRe.FindStringSubmatch(path); m != nil && slurmJob == "" {
			slurmJob = m[1]
		}
	}
	return podUID, containerID, slurmJob
}

// State is the one-letter state of a process (R, S, Z, ...).
func (fs *FS) State(pid int) (byte, error) {
	b, err := os.ReadFile(filepath.Join(fs.root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, errors.New("malformed stat")
	}
	return b[i+2], nil
}

func (fs *FS) startTime(dir string) (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	// comm may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return time.Time{}, errors.New("malformed stat")
	}
	f := bytes.Fields(b[i+1:])
	const startTimeField = 22 - 3 // field 22 of stat; f[0] is field 3
	if len(f) <= startTimeField {
		return time.Time{}, errors.New("short stat")
	}
	ticks, err := strconv.ParseInt(string(f[startTimeField]), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	boot, err := fs.boot()
	if err != nil {
		return time.Time{}, err
	}
	return boot.Add(time.Duration(ticks) * time.Second / time.Duration(fs.clockTick)), nil
}

func (fs *FS) boot() (time.Time, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.bootTime.IsZero() {
		return fs.bootTime, nil
	}
	f, err := os.Open(filepath.Join(fs.root, "stat"))
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			fs.bootTime = time.Unix(s, 0).UTC()
			return fs.bootTime, nil
		}
	}
	return time.Time{}, errors.New("no btime in stat")
}

// userName maps a uid to a name through the passwd file, re-read when it changes.
func (fs *FS) userName(uid int) string {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.passwd != "" {
		if st, err := os.Stat(fs.passwd); err == nil && !st.ModTime().Equal(fs.usersMod) {
			if users, err := readPasswd(fs.passwd); err == nil {
				fs.users, fs.usersMod = users, st.ModTime()
			}
		}
	}
	if name, ok := fs.users[uid]; ok {
		return name
	}
	return strconv.Itoa(uid)
}

func readPasswd(path string) (map[int]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	users := map[int]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		if uid, err := strconv.Atoi(f[2]); err == nil {
			if _, dup := users[uid]; !dup {
				users[uid] = f[0]
			}
		}
	}
	return users, nil
}
