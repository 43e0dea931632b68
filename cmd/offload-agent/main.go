// Command offload-agent runs the in-cluster components of kubectl-offload.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := app.Run(ctx, os.Stdout, os.Stderr, os.Args[1:])
	stop()
	os.Exit(code)
}
