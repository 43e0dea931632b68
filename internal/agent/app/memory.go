package app

import (
	"runtime/debug"
	"strconv"
)

// memoryLimitEnv names the container's memory limit in bytes, which the
// chart sets from the pod's limits.memory.
const memoryLimitEnv = "OFFLOAD_MEMORY_LIMIT"

// binaryReserve is the part of the container's memory limit left for the
// agent's binary: the pages of its code and tables it runs from, which the
// kernel counts in the container's memory and the Go runtime does not
// (measured with make bench-offload: some 56 MiB of the 80 MB binary
// resident in the consumer's agent). Leaving them room keeps them in memory
// when the heap is near its limit, rather than the kernel evicting the
// code the agent runs, or killing the container.
const binaryReserve = 64 << 20

// memoryLimit returns the Go runtime's memory limit for the container
// limit getenv(memoryLimitEnv) names: the limit less binaryReserve, and at
// least half of it. It returns false when GOMEMLIMIT is set, which the
// runtime already follows, or when no valid limit is named.
func memoryLimit(getenv func(string) string) (int64, bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	limit, err := strconv.ParseInt(getenv(memoryLimitEnv), 10, 64)
	if err != nil || limit <= 0 {
		return 0, false
	}
	return max(limit-binaryReserve, limit/2), true
}

// setMemoryLimit sets the Go runtime's memory limit from the container's,
// as memoryLimit says.
func setMemoryLimit(getenv func(string) string) {
	if limit, ok := memoryLimit(getenv); ok {
		debug.SetMemoryLimit(limit)
	}
}
