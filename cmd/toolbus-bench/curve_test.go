package main

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// scale measures each combination of worker and coordinator processes it
// is given, in order, each making the calls asked for.
func TestScaleReports(t *testing.T) {
	t.Parallel()
	var r scaleReport
	runToJSON(t, &r, "scale", "--workers", "1,2", "--coordinators", "1", "--calls", "300", "--callers", "8", "--rounds", "1", "--prefix", "tbscale")
	if r.Calls != 300 || r.Callers != 8 || r.Rounds != 1 || r.Path != "realistic" || len(r.Runs) != 2 {
		t.Fatalf("report %+v, want two runs of 300 calls from 8 callers on the realistic path, one round", r)
	}
	if r.Runs[0].VsFirst != 1 {
		t.Errorf("the first combination against itself: %v", r.Runs[0].VsFirst)
	}
	for i, workers := range []int{1, 2} {
		p := r.Runs[i]
		if p.Workers != workers || p.Coordinators != 1 || p.CallsPerS <= 0 || p.P50US <= 0 || p.P99US < p.P50US {
			t.Errorf("run %d: %+v, want %d workers, 1 coordinator and measured figures", i, p, workers)
		}
		// Every call crosses the server, a coordinator and a worker; 300
		// calls take far more CPU than the four clock ticks (10 ms each) that
		// reading four processes' times can lose.
		if p.ServerCPUPerCallUS+p.CoordinatorCPUPerCallUS+p.WorkerCPUPerCallUS+p.CallerCPUPerCallUS <= 0 {
			t.Errorf("run %d: no CPU time measured: %+v", i, p)
		}
	}
}

// inflight holds every call running on the plateau: the server counts
// their progress (one event a second each) and leases (a third of the ack
// wait apart), and the processes' memory and a short call's latency are
// measured.
func TestInflightReports(t *testing.T) {
	t.Parallel()
	var r inflightReport
	runToJSON(t, &r, "inflight", "--calls", "20", "--workers", "2", "--plateau", "3s", "--ack-wait", "1500ms", "--short-calls", "20", "--prefix", "tbinflight")
	if r.Calls != 20 || r.Workers != 2 || r.SlotsPerWkr != 10 || r.AckWaitMS != 1500 || r.ShortCalls != 20 {
		t.Fatalf("report %+v", r)
	}
	// 20 calls: 20 progress events and 40 leases a second, give or take
	// the plateau's edges.
	if r.ProgressPerS < 10 || r.ProgressPerS > 30 || r.LeasesPerS < 20 || r.LeasesPerS > 60 {
		t.Errorf("progress %.1f/s and leases %.1f/s, want about 20 and 40", r.ProgressPerS, r.LeasesPerS)
	}
	if r.ServerInMsgsPerS < r.ProgressPerS+r.LeasesPerS || r.LeaseShareOfIn <= 0 || r.ProgressShareOfIn <= 0 || r.LeaseShareOfIn+r.ProgressShareOfIn > 1 {
		t.Errorf("server in %.1f msgs/s, shares %.2f and %.2f: the leases and progress must be part of it", r.ServerInMsgsPerS, r.LeaseShareOfIn, r.ProgressShareOfIn)
	}
	if r.CoordinatorRSSMB <= 0 || r.WorkersRSSMB <= 0 || r.ServerRSSMB <= 0 || r.ServerMemMB <= 0 || r.WorkersIdleRSSMB <= 0 {
		t.Errorf("memory not measured: %+v", r)
	}
	if r.ShortP50US <= 0 || r.ShortIdleP50US <= 0 || r.ShortP99US < r.ShortP50US {
		t.Errorf("short calls not measured: %+v", r)
	}
}

// history stores its calls in whole turns and measures every read; a
// calls.list that no coordinator serves yet is reported, not fatal.
func TestHistoryReports(t *testing.T) {
	t.Parallel()
	var r historyReport
	runToJSON(t, &r, "history", "--calls", "100", "--samples", "20", "--callers", "4", "--prefix", "tbhistory")
	if r.Calls != 100 || r.Turns != 5 || r.TurnCalls != 20 || r.Samples != 20 || r.StoredPerS <= 0 {
		t.Fatalf("report %+v", r)
	}
	for name, p50 := range map[string]float64{"calls.get": r.CallsGetP50US, "old turns.get": r.TurnsGetOldP50US, "young turns.get": r.TurnsGetYoungP50US, "turns.get": r.TurnsGetP50US, "tools.list": r.ToolsListP50US, "resume": r.ResumeP50US} {
		if p50 <= 0 {
			t.Errorf("%s not measured: %+v", name, r)
		}
	}
	if r.ServerRSSMB <= 0 || r.ServerRSSAfterReadsMB <= 0 || r.StoreMB <= 0 {
		t.Errorf("the server's memory and store not measured: %+v", r)
	}
	if (r.CallsListError == "") == (r.CallsListP50US == 0) {
		t.Errorf("calls.list neither measured nor explained: %+v", r)
	}
}

// The modes refuse counts that are not positive.
func TestCurveUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"scale", "--workers", "0"}, {"scale", "--coordinators", "1,x"}, {"inflight", "--calls", "0"}, {"history", "--turn-calls", "65"}, {"history", "extra"}} {
		if err := run(testenv.Context(t), args); err != exitError(2) {
			t.Errorf("toolbus-bench %s: %v, want exit status 2", strings.Join(args, " "), err)
		}
	}
}
