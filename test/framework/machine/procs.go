package machine

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Processes of the agents and control planes on this host, as /proc shows
// them: benchmarks read their CPU and memory, tests kill them.

// ClockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat; it is
// 100 on every Linux architecture Go supports.
const ClockTicks = 100

// AgentPID finds the controller-manager process of the agent of cluster on
// this host: /offload-agent controller-manager, with
// OFFLOAD_CLUSTER_NAME=cluster in its environment. When the container was
// restarted the youngest process wins.
func AgentPID(cluster string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	best, bestStart := 0, -1.0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(argv) < 2 || filepath.Base(argv[0]) != "offload-agent" || argv[1] != "controller-manager" {
			continue
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !strings.Contains("\x00"+string(environ)+"\x00", "\x00OFFLOAD_CLUSTER_NAME="+cluster+"\x00") {
			continue
		}
		st, err := ProcStat(pid)
		if err != nil {
			continue
		}
		if start := st[19]; start > bestStart {
			best, bestStart = pid, start
		}
	}
	if best == 0 {
		return 0, fmt.Errorf("no offload-agent controller-manager process of cluster %s on this host", cluster)
	}
	return best, nil
}

// ProcStat returns the numeric fields of /proc/<pid>/stat that follow the
// command name, from field 3 (state, as NaN) on.
func ProcStat(pid int) ([]float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return nil, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, s)
	}
	out := make([]float64, len(fields))
	for j, f := range fields {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			v = math.NaN()
		}
		out[j] = v
	}
	return out, nil
}

// CPUSeconds returns the user plus system CPU time pid has used.
func CPUSeconds(pid int) (float64, error) {
	st, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	// utime and stime are fields 14 and 15 of the file.
	return (st[11] + st[12]) / ClockTicks, nil
}

// RSSMiB returns VmRSS of pid in MiB.
func RSSMiB(pid int) (float64, error) {
	return statusMiB(pid, "VmRSS")
}

// AnonRSSMiB returns RssAnon of pid in MiB: its resident memory less the
// pages of files it maps, such as its own binary's.
func AnonRSSMiB(pid int) (float64, error) {
	return statusMiB(pid, "RssAnon")
}

// statusMiB returns field (a size in kB) of /proc/PID/status in MiB.
func statusMiB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
