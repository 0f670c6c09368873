//go:build unix

package coordinator

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time the process has used, in user and system
// mode: benchmarks report it beside wall time, which other load on the
// machine inflates.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
