package worker

import (
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// A report held for the interval, whose timer fires only after a newer
// report went out at once, is not sent after that newer one.
func TestProgressHeldReportIsNotSentAfterANewerOne(t *testing.T) {
	var sent []float64
	r := &progressReporter{interval: time.Hour, publish: func(p messages.Progress) { sent = append(sent, p.Progress) }}
	r.report(messages.Progress{Progress: 1})
	r.report(messages.Progress{Progress: 2}) // held: within the interval
	r.mu.Lock()
	r.timer.Stop()
	r.last = time.Now().Add(-2 * time.Hour) // the interval has passed; the timer is late
	r.mu.Unlock()
	r.report(messages.Progress{Progress: 3})
	r.flushLater() // the late timer
	r.close()
	if len(sent) != 2 || sent[0] != 1 || sent[1] != 3 {
		t.Fatalf("sent %v, want [1 3]", sent)
	}
}
