//go:build !unix

package search

import "time"

func processCPU() time.Duration { return 0 }
