package nvmlsim

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ClockTicks is the USER_HZ the simulated /proc/<pid>/stat counts in.
const ClockTicks = 100

// bootTime is when the simulated node booted: a day before time 0.
func (s *Sim) bootTime() time.Time { return s.start.Add(-24 * time.Hour).Truncate(time.Second) }

// ContainerID is the container runtime's id for a pod's container, as it
// appears in the process's cgroup path.
func ContainerID(podUID, container string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(podUID+"/"+container)))
}

// WriteFS writes the /proc tree and passwd file that match the scenario's
// processes under dir: dir/proc/<pid>/{status,cgroup,stat,cmdline},
// dir/proc/stat and dir/etc/passwd. Kill and RemovePod keep it in step.
func (s *Sim) WriteFS(dir string) (procRoot, passwd string, err error) {
	procRoot, passwd = filepath.Join(dir, "proc"), filepath.Join(dir, "etc", "passwd")
	if err := os.MkdirAll(procRoot, 0o755); err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(filepath.Dir(passwd), 0o755); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(procRoot, "stat"), fmt.Appendf(nil, "cpu  0 0 0 0 0 0 0 0 0 0\nbtime %d\n", s.bootTime().Unix()), 0o644); err != nil {
		return "", "", err
	}
	var users []string
	for name := range s.sc.Users {
		users = append(users, name)
	}
	sort.Strings(users)
	var pw strings.Builder
	for _, name := range users {
		uid := s.sc.Users[name]
		home := "/home/" + name
		if uid == 0 {
			home = "/root"
		}
		fmt.Fprintf(&pw, "%s:x:%d:%d::%s:/bin/bash\n", name, uid, uid, home)
	}
	if err := os.WriteFile(passwd, []byte(pw.String()), 0o644); err != nil {
		return "", "", err
	}
	pods := map[string]*Pod{}
	for i := range s.sc.Pods {
		pods[s.sc.Pods[i].Name] = &s.sc.Pods[i]
	}
	s.mu.Lock()
	s.procRoot = procRoot
	s.mu.Unlock()
	for _, d := range s.devices {
		if d.cfg.MPS {
			p := Process{PID: mpsServerPID(d.cfg.Index), User: "root", Command: "nvidia-cuda-mps-server", Started: Duration(-time.Hour)}
			if err := s.writeProc(procRoot, &p, "/system.slice/nvidia-mps.service"); err != nil {
				return "", "", err
			}
		}
		for _, u := range d.units() {
			for i := range u.cfg.Processes {
				p := &u.cfg.Processes[i]
				if !s.Alive(p.PID) || p.OutsideProc {
					continue
				}
				if err := s.writeProc(procRoot, p, s.cgroupOf(p, pods)); err != nil {
					return "", "", err
				}
			}
		}
	}
	return procRoot, passwd, nil
}

func (s *Sim) cgroupOf(p *Process, pods map[string]*Pod) string {
	uid := s.sc.Users[p.User]
	switch {
	case p.Pod != "":
		pod := pods[p.Pod]
		return fmt.Sprintf("/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope",
			strings.ReplaceAll(pod.UID, "-", "_"), ContainerID(pod.UID, pod.Container))
	case p.SlurmJob != "":
		return fmt.Sprintf("/system.slice/slurmstepd.scope/job_%s/step_0/user/task_0", p.SlurmJob)
	}
	return fmt.Sprintf("/user.slice/user-%d.slice/session-3.scope", uid)
}

func (s *Sim) writeProc(root string, p *Process, cgroup string) error {
	dir := filepath.Join(root, fmt.Sprint(p.PID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	uid := s.sc.Users[p.User]
	args := strings.Fields(p.Command)
	comm := filepath.Base(args[0])
	if len(comm) > 15 {
		comm = comm[:15]
	}
	started := s.start.Add(time.Duration(p.Started)).Sub(s.bootTime())
	ticks := int64(started.Seconds() * ClockTicks)
	files := map[string]string{
		"status":  fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t%d\nPid:\t%d\nPPid:\t1\nUid:\t%d\t%d\t%d\t%d\nGid:\t%d\t%d\t%d\t%d\n", comm, p.PID, p.PID, uid, uid, uid, uid, uid, uid, uid, uid),
		"cgroup":  "0::" + cgroup + "\n",
		"stat":    fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", p.PID, comm, p.PID, p.PID, ticks),
		"cmdline": strings.Join(args, "\x00") + "\x00",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// removeProc deletes a process's /proc entry; s.mu is held.
func (s *Sim) removeProc(pid int) {
	if s.procRoot != "" {
		_ = os.RemoveAll(filepath.Join(s.procRoot, fmt.Sprint(pid)))
	}
}
