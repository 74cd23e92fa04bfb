package chtest

import (
	"runtime"
	"syscall"
)

// deathSignal makes the kernel send SIGTERM to chlocal when the test binary
// exits, so that it never outlives the tests and removes its temporary data.
func deathSignal() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

func lockThread() { runtime.LockOSThread() }
