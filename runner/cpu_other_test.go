//go:build !unix

package runner

import "time"

// processCPU is not measured off unix: the benchmark reports 0.
func processCPU() time.Duration { return 0 }
