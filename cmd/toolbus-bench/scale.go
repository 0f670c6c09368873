package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// scaleReport is the last line of the scale mode.
type scaleReport struct {
	Calls   int          `json:"calls"`
	Callers int          `json:"callers"`
	Rounds  int          `json:"rounds"`
	Path    string       `json:"path"`
	Runs    []scalePoint `json:"runs"`
}

// scalePoint is one combination's figures: throughput (the median of the
// rounds) and latency (percentiles of every round's calls) with so many
// worker and coordinator processes.
type scalePoint struct {
	Workers      int     `json:"workers"`
	Coordinators int     `json:"coordinators"`
	CallsPerS    float64 `json:"calls_per_s"`
	P50US        float64 `json:"p50_us"`
	P99US        float64 `json:"p99_us"`
	// VsFirst is CallsPerS against the first combination's.
	VsFirst float64 `json:"vs_first"`
	// CPU time per call, in µs, of each kind of process (summed over its
	// processes; the callers are the bench's own process), over all rounds.
	ServerCPUPerCallUS      float64 `json:"server_cpu_per_call_us"`
	CoordinatorCPUPerCallUS float64 `json:"coordinator_cpu_per_call_us"`
	WorkerCPUPerCallUS      float64 `json:"worker_cpu_per_call_us"`
	CallerCPUPerCallUS      float64 `json:"caller_cpu_per_call_us"`
}

// scaleRun is one round's measurement of a combination.
type scaleRun struct {
	callsPerS                              float64
	lat                                    []time.Duration
	server, coordinators, workers, callers time.Duration // CPU time
}

// runScale measures throughput against the number of worker processes and
// coordinator processes, each combination on a fresh server process.
func runScale(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench scale", flag.ContinueOnError)
	workersList := fs.String("workers", "1,2,4", "worker process counts to measure, comma-separated")
	coordinatorsList := fs.String("coordinators", "1,2", "coordinator process counts to measure, comma-separated")
	calls := fs.Int("calls", 5000, "calls per measurement")
	rounds := fs.Int("rounds", 3, "rounds; each measures every combination, in alternating order, on fresh processes")
	callers := fs.Int("callers", 64, "concurrent callers")
	slots := fs.Int("slots", 64, "slots of each worker process")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix and resource-name stem of the Toolbus measured")
	if err := parse(fs, args); err != nil {
		return err
	}
	names, err := messages.NewNames(*prefix)
	if err != nil {
		return err
	}
	workerCounts, err := counts("--workers", *workersList)
	if err != nil {
		return err
	}
	coordinatorCounts, err := counts("--coordinators", *coordinatorsList)
	if err != nil {
		return err
	}
	if *calls < 1 || *callers < 1 || *rounds < 1 || *slots < 1 {
		return exitErrorf("scale: --calls, --callers, --rounds and --slots must be positive")
	}
	r := scaleReport{Calls: *calls, Callers: *callers, Rounds: *rounds, Path: "realistic"}
	var combos []stackConfig
	for _, w := range workerCounts {
		for _, c := range coordinatorCounts {
			combos = append(combos, stackConfig{names: names, coordinators: c, workers: w, slots: *slots})
		}
	}
	// The machine's background load drifts; measuring the combinations in
	// turns, in alternating order, spreads the drift over all of them.
	runs := make([][]scaleRun, len(combos))
	for round := range *rounds {
		for k := range combos {
			i := k
			if round%2 == 1 {
				i = len(combos) - 1 - k
			}
			cfg := combos[i]
			fmt.Fprintf(os.Stderr, "round %d: %d worker and %d coordinator processes, %d calls from %d callers\n", round+1, cfg.workers, cfg.coordinators, *calls, *callers)
			run, err := measureScale(ctx, cfg, *calls, *callers)
			if err != nil {
				return fmt.Errorf("%d workers, %d coordinators: %w", cfg.workers, cfg.coordinators, err)
			}
			runs[i] = append(runs[i], run)
		}
	}
	for i, cfg := range combos {
		var rates []float64
		var lat []time.Duration
		var server, coordinators, workers, callers time.Duration
		for _, run := range runs[i] {
			rates, lat = append(rates, run.callsPerS), append(lat, run.lat...)
			server, coordinators, workers, callers = server+run.server, coordinators+run.coordinators, workers+run.workers, callers+run.callers
		}
		perCall := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(len(lat)) }
		r.Runs = append(r.Runs, scalePoint{Workers: cfg.workers, Coordinators: cfg.coordinators, CallsPerS: median(rates), P50US: percentileUS(lat, 50), P99US: percentileUS(lat, 99),
			ServerCPUPerCallUS: perCall(server), CoordinatorCPUPerCallUS: perCall(coordinators), WorkerCPUPerCallUS: perCall(workers), CallerCPUPerCallUS: perCall(callers)})
		r.Runs[i].VsFirst = r.Runs[i].CallsPerS / r.Runs[0].CallsPerS
	}
	fmt.Fprintf(os.Stderr, "\n%d calls from %d callers per measurement; calls/s the median of %d rounds\n", r.Calls, r.Callers, r.Rounds)
	fmt.Fprintf(os.Stderr, "%-8s %-13s %10s %9s %9s %9s   %s\n", "workers", "coordinators", "calls/s", "vs first", "p50 µs", "p99 µs", "CPU µs per call: server, coordinators, workers, callers")
	for _, p := range r.Runs {
		fmt.Fprintf(os.Stderr, "%-8d %-13d %10.0f %9.2f %9.0f %9.0f   %.0f, %.0f, %.0f, %.0f\n", p.Workers, p.Coordinators, p.CallsPerS, p.VsFirst, p.P50US, p.P99US,
			p.ServerCPUPerCallUS, p.CoordinatorCPUPerCallUS, p.WorkerCPUPerCallUS, p.CallerCPUPerCallUS)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}

// measureScale starts the processes of one combination and measures it.
func measureScale(ctx context.Context, cfg stackConfig, calls, callers int) (scaleRun, error) {
	s, err := startStack(cfg)
	if err != nil {
		return scaleRun{}, err
	}
	defer s.stop()
	tb, err := s.agent(ctx)
	if err != nil {
		return scaleRun{}, err
	}
	// Warm every process before measuring: the calls spread over the
	// coordinators' queue group and the workers' pulls.
	if _, err := concurrentLatencies(ctx, 100*(cfg.workers+cfg.coordinators), callers, tb.call); err != nil {
		return scaleRun{}, err
	}
	server0, coordinators0, workers0, callers0 := s.cpu()
	start := time.Now()
	lat, err := concurrentLatencies(ctx, calls, callers, tb.call)
	if err != nil {
		return scaleRun{}, err
	}
	run := scaleRun{callsPerS: float64(calls) / time.Since(start).Seconds(), lat: lat}
	server, coordinators, workers, self := s.cpu()
	run.server, run.coordinators, run.workers, run.callers = server-server0, coordinators-coordinators0, workers-workers0, self-callers0
	return run, nil
}

// concurrentLatencies makes n calls from so many concurrent callers and
// returns each call's latency.
func concurrentLatencies(ctx context.Context, n, callers int, call func(context.Context) error) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				start := time.Now()
				if err := call(ctx); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	wg.Wait()
	return lat, firstErr
}

// counts parses a comma-separated list of positive counts.
func counts(flagName, list string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, exitErrorf("%s: %q is not a positive count", flagName, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// exitErrorf says what was wrong with the command line and exits with status 2.
func exitErrorf(format string, args ...any) error {
	fmt.Fprintf(os.Stderr, "toolbus-bench: "+format+"\n", args...)
	return exitError(2)
}
