package chlocal

import (
	"syscall"
	"unsafe"
)

// goSignals are the signals whose handlers the Go runtime relies on and chDB
// may replace or reset: synchronous faults (panics, stack growth), SIGURG
// (preemption), and the ones os/signal delivers to cmd/chlocal.
var goSignals = []syscall.Signal{
	syscall.SIGABRT, syscall.SIGSEGV, syscall.SIGILL, syscall.SIGBUS, syscall.SIGSYS,
	syscall.SIGFPE, syscall.SIGTSTP, syscall.SIGTRAP, syscall.SIGURG, syscall.SIGPIPE,
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGCHLD,
}

// kernelSigaction is large enough for the kernel's struct sigaction on
// amd64 and arm64 (handler, flags, restorer, 8-byte mask); it is only
// copied out and back, never interpreted.
type kernelSigaction [4]uint64

type savedSignals []kernelSigaction

func saveSignals() savedSignals {
	saved := make(savedSignals, len(goSignals))
	for i, sig := range goSignals {
		_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), 0,
			uintptr(unsafe.Pointer(&saved[i])), 8, 0, 0)
	}
	return saved
}

func restoreSignals(saved savedSignals) {
	for i, sig := range goSignals {
		_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
			uintptr(unsafe.Pointer(&saved[i])), 0, 8, 0, 0)
	}
}
