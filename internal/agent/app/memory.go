package app

import (
	"runtime/debug"
	"strconv"
)

// memoryLimitEnv names the container's memory limit in bytes, which the
// chart sets from the pod's limits.memory.
const memoryLimitEnv = "OFFLOAD_MEMORY_LIMIT"

// memoryLimitShare is the part of the container's memory limit the Go
// runtime aims to stay under: the rest is for what the runtime does not
// count (its own metadata, stacks in flight, the kernel's page cache of the
// binary), so that a heap near its limit makes the runtime collect harder
// rather than the kernel kill the container.
const memoryLimitShare = 0.9

// memoryLimit returns the Go runtime's memory limit for the container
// limit getenv(memoryLimitEnv) names: memoryLimitShare of it. It returns
// false when GOMEMLIMIT is set, which the runtime already follows, or when
// no valid limit is named.
func memoryLimit(getenv func(string) string) (int64, bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	limit, err := strconv.ParseInt(getenv(memoryLimitEnv), 10, 64)
	if err != nil || limit <= 0 {
		return 0, false
	}
	return int64(float64(limit) * memoryLimitShare), true
}

// setMemoryLimit sets the Go runtime's memory limit from the container's,
// as memoryLimit says.
func setMemoryLimit(getenv func(string) string) {
	if limit, ok := memoryLimit(getenv); ok {
		debug.SetMemoryLimit(limit)
	}
}
