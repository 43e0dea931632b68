package netlab

import (
	"runtime"

	"github.com/vishvananda/netns"
)

// InNetNS runs fn on a thread switched into network namespace name (as
// `ip netns` names it); the sockets fn opens stay in that namespace.
func InNetNS(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	host, err := netns.Get()
	if err != nil {
		return err
	}
	defer func() { _ = host.Close() }()
	target, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer func() { _ = target.Close() }()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer func() { _ = netns.Set(host) }()
	return fn()
}
