//go:build unix

package runner

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used: the runner's share of a
// benchmark, since the engine runs in chlocal's own process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
