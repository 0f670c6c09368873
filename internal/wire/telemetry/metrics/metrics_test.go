package metrics

import (
	"testing"
	"time"
)

// The call path's cost of the instruments when no meter provider is
// installed: one atomic load each, no allocation.
func BenchmarkCallFinishedDisabled(b *testing.B) {
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		CallSubmitted("demo-echo", "demo")
		CallRunning("demo-echo", "demo", 1)
		CallRunning("demo-echo", "demo", -1)
		CallFinished("demo-echo", "demo", "completed", now, now, now)
	}
}

func TestDisabledInstrumentsDoNotAllocate(t *testing.T) {
	now := time.Now()
	if Enabled() {
		t.Skip("a provider is installed in this test binary")
	}
	allocs := testing.AllocsPerRun(100, func() {
		CallSubmitted("demo-echo", "demo")
		CallFinished("demo-echo", "demo", "completed", now, now, now)
		SlotsBusy("demo", 1)
		RequestError("calls.submit", "denied")
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call path with metrics off", allocs)
	}
}
