// Command pause is the sandbox ("pause") image of the test node's
// containerd. It is PID 1 of every pod: it blocks until SIGINT or SIGTERM,
// reaps the zombie children the pod's processes leave behind, and exits 0
// when told to stop. Build it static (CGO_ENABLED=0); the image holds nothing
// else.
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		reap()
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
	}
}

// reap collects every child that has exited. Signals coalesce, so one
// SIGCHLD may stand for several children: wait until none is left.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
