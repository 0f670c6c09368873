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
	rates := make([][]float64, len(combos))
	lats := make([][]time.Duration, len(combos))
	for round := range *rounds {
		for k := range combos {
			i := k
			if round%2 == 1 {
				i = len(combos) - 1 - k
			}
			cfg := combos[i]
			fmt.Fprintf(os.Stderr, "round %d: %d worker and %d coordinator processes, %d calls from %d callers\n", round+1, cfg.workers, cfg.coordinators, *calls, *callers)
			rate, lat, err := measureScale(ctx, cfg, *calls, *callers)
			if err != nil {
				return fmt.Errorf("%d workers, %d coordinators: %w", cfg.workers, cfg.coordinators, err)
			}
			rates[i], lats[i] = append(rates[i], rate), append(lats[i], lat...)
		}
	}
	for i, cfg := range combos {
		r.Runs = append(r.Runs, scalePoint{Workers: cfg.workers, Coordinators: cfg.coordinators, CallsPerS: median(rates[i]), P50US: percentileUS(lats[i], 50), P99US: percentileUS(lats[i], 99)})
		r.Runs[i].VsFirst = r.Runs[i].CallsPerS / r.Runs[0].CallsPerS
	}
	fmt.Fprintf(os.Stderr, "\n%d calls from %d callers per measurement; calls/s the median of %d rounds\n", r.Calls, r.Callers, r.Rounds)
	fmt.Fprintf(os.Stderr, "%-8s %-13s %10s %9s %9s %9s\n", "workers", "coordinators", "calls/s", "vs first", "p50 µs", "p99 µs")
	for _, p := range r.Runs {
		fmt.Fprintf(os.Stderr, "%-8d %-13d %10.0f %9.2f %9.0f %9.0f\n", p.Workers, p.Coordinators, p.CallsPerS, p.VsFirst, p.P50US, p.P99US)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}

// measureScale starts the processes of one combination and returns its
// calls per second and each call's latency.
func measureScale(ctx context.Context, cfg stackConfig, calls, callers int) (float64, []time.Duration, error) {
	s, err := startStack(cfg)
	if err != nil {
		return 0, nil, err
	}
	defer s.stop()
	tb, err := s.agent(ctx)
	if err != nil {
		return 0, nil, err
	}
	// Warm every process before measuring: the calls spread over the
	// coordinators' queue group and the workers' pulls.
	if _, err := concurrentLatencies(ctx, 100*(cfg.workers+cfg.coordinators), callers, tb.call); err != nil {
		return 0, nil, err
	}
	start := time.Now()
	lat, err := concurrentLatencies(ctx, calls, callers, tb.call)
	if err != nil {
		return 0, nil, err
	}
	return float64(calls) / time.Since(start).Seconds(), lat, nil
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
