package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 1: 1, 2: 2, 3: 4, 4: 4, 5: 10, 10: 10, 11: 20, 35: 40, 41: 100, 999: 1000, 1001: 2000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}

func TestDurationLabels(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 5: "5ms", 999: "999ms", 1000: "1s", 1500: "1.5s", 60000: "1m0s", 125000: "2m5s"} {
		if got := duration(in); got != want {
			t.Errorf("duration(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestIDParts(t *testing.T) {
	id := "EKkPF2SGx39CbREeGbZDx5EKkPF2SGx39CbREeGbZERP"
	p := idParts(id)
	if p.Head != "EKkPF" || p.Tail != "bZERP" || p.Head+p.Middle+p.Tail != id || p.Whole != id {
		t.Errorf("idParts(%q) = %+v", id, p)
	}
	if short := idParts("t-1234567890"); short.Head != "t-1234567890" || short.Middle != "" || short.Tail != "" {
		t.Errorf("a short ID is cut: %+v", short)
	}
}

// TestProgressOf: a completed call's bar is full whatever its tool last
// reported; a running call without a fraction is of unknown extent; an
// ended call keeps the fraction it reached.
func TestProgressOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		info  messages.CallInfo
		value float64
		text  string
	}{
		{"completed without progress", messages.CallInfo{State: messages.StateCompleted}, 1, "complete"},
		{"completed at 3 of 10", messages.CallInfo{State: messages.StateCompleted, Progress: &messages.Progress{Progress: 3, Total: 10}}, 1, "complete"},
		{"running at 3 of 10", messages.CallInfo{State: messages.StateRunning, Progress: &messages.Progress{Progress: 3, Total: 10, Message: "copying"}}, 0.3, "3 of 10: copying"},
		{"running without progress", messages.CallInfo{State: messages.StateRunning}, -1, ""},
		{"running, total unknown", messages.CallInfo{State: messages.StateRunning, Progress: &messages.Progress{Progress: 7}}, -1, "7"},
		{"queued", messages.CallInfo{State: messages.StateQueued}, 0, ""},
		{"failed at 3 of 4", messages.CallInfo{State: messages.StateFailed, Progress: &messages.Progress{Progress: 3, Total: 4}}, 0.75, "3 of 4"},
		{"cancelled, total unknown", messages.CallInfo{State: messages.StateCancelled, Progress: &messages.Progress{Progress: 7}}, 0, "7"},
	} {
		got := progressOf(&tc.info)
		if got.Value != tc.value || got.Text != tc.text {
			t.Errorf("%s: %+v, want value %v text %q", tc.name, got, tc.value, tc.text)
		}
	}
}

// TestCallsChartStacksEndStates: the calls chart stacks each minute's
// ended calls by end state, draws the flows as lines over the counted
// minutes, and shades the minutes the scan did not reach.
func TestCallsChartStacksEndStates(t *testing.T) {
	since := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	reply := &messages.CallStatsReply{Since: since, Until: since.Add(3 * time.Minute), CountedSince: since.Add(90 * time.Second), Minutes: []messages.StatsMinute{
		{Start: since},
		{Start: since.Add(time.Minute), States: map[messages.CallState]int{messages.StateCompleted: 2}},
		{Start: since.Add(2 * time.Minute), States: map[messages.CallState]int{messages.StateCompleted: 3, messages.StateFailed: 1, messages.StateQueued: 4}},
	}}
	c := callsChart(reply)
	if len(c.Bars) != 3 {
		t.Fatalf("bars %+v, want completed in minute 1, completed and failed in minute 2", c.Bars)
	}
	completed, failed := c.Bars[1], c.Bars[2]
	if completed.State != "completed" || failed.State != "failed" || completed.Count != 3 || failed.Count != 1 {
		t.Fatalf("minute 2's bars: %+v %+v", completed, failed)
	}
	if failed.Y+failed.H != completed.Y || completed.Y+completed.H != c.PlotBottom() {
		t.Errorf("failed (%v+%v) is not stacked on completed (%v+%v) on the axis at %v", failed.Y, failed.H, completed.Y, completed.H, c.PlotBottom())
	}
	if c.Uncounted == nil || c.Uncounted.W <= 0 || !strings.Contains(c.Uncounted.Title, "11:01:30") {
		t.Errorf("uncounted: %+v, want the minutes before 11:01:30 shaded", c.Uncounted)
	}
	if len(c.YTicks) != 3 || c.YTicks[2].Label != "4" {
		t.Errorf("y ticks %+v, want 0, 2, 4", c.YTicks)
	}
	// The queued line: 4 in the one minute counted whole, a dot.
	queued := 0
	for _, d := range c.Dots {
		if d.Series == "queued" {
			queued++
		}
	}
	if queued != 1 {
		t.Errorf("dots %+v, want one of queued", c.Dots)
	}
	if len(c.Columns) != 3 || !strings.Contains(c.Columns[2].Title, "queued 4") || !strings.Contains(c.Columns[0].Title, "no calls") {
		t.Errorf("hover titles: %+v", c.Columns)
	}
}
