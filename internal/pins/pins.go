//go:build pins

// Package pins keeps the pinned dependencies of later components in go.mod
// before code imports them, so `go mod tidy` cannot drop or drift them. It
// is never built (the pins build tag is never set).
package pins

import (
	_ "github.com/virtual-kubelet/virtual-kubelet/node"
	_ "golang.zx2c4.com/wireguard/device"
	_ "golang.zx2c4.com/wireguard/wgctrl"
)
