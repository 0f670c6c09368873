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
	Path    string       `json:"path"`
	Runs    []scalePoint `json:"runs"`
}

// scalePoint is one measurement: throughput and latency with so many
// worker and coordinator processes.
type scalePoint struct {
	Workers      int     `json:"workers"`
	Coordinators int     `json:"coordinators"`
	CallsPerS    float64 `json:"calls_per_s"`
	P50US        float64 `json:"p50_us"`
	P99US        float64 `json:"p99_us"`
}

// runScale measures throughput against the number of worker processes and
// coordinator processes, each combination on a fresh server process.
func runScale(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench scale", flag.ContinueOnError)
	workersList := fs.String("workers", "1,2,4", "worker process counts to measure, comma-separated")
	coordinatorsList := fs.String("coordinators", "1,2", "coordinator process counts to measure, comma-separated")
	calls := fs.Int("calls", 5000, "calls per measurement")
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
	r := scaleReport{Calls: *calls, Callers: *callers, Path: "realistic"}
	for _, w := range workerCounts {
		for _, c := range coordinatorCounts {
			fmt.Fprintf(os.Stderr, "%d worker and %d coordinator processes: %d calls from %d callers\n", w, c, *calls, *callers)
			point, err := measureScale(ctx, stackConfig{names: names, coordinators: c, workers: w, slots: *slots}, *calls, *callers)
			if err != nil {
				return fmt.Errorf("%d workers, %d coordinators: %w", w, c, err)
			}
			r.Runs = append(r.Runs, point)
		}
	}
	fmt.Fprintf(os.Stderr, "\n%-8s %-13s %10s %9s %9s\n", "workers", "coordinators", "calls/s", "p50 µs", "p99 µs")
	for _, p := range r.Runs {
		fmt.Fprintf(os.Stderr, "%-8d %-13d %10.0f %9.0f %9.0f\n", p.Workers, p.Coordinators, p.CallsPerS, p.P50US, p.P99US)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}

func measureScale(ctx context.Context, cfg stackConfig, calls, callers int) (scalePoint, error) {
	point := scalePoint{Workers: cfg.workers, Coordinators: cfg.coordinators}
	s, err := startStack(cfg)
	if err != nil {
		return point, err
	}
	defer s.stop()
	tb, err := s.agent(ctx)
	if err != nil {
		return point, err
	}
	// Warm every process before measuring: the calls go round robin over
	// the coordinators' queue group and the workers' pulls.
	if _, err := concurrentLatencies(ctx, 50*(cfg.workers+cfg.coordinators), callers, tb.call); err != nil {
		return point, err
	}
	start := time.Now()
	lat, err := concurrentLatencies(ctx, calls, callers, tb.call)
	if err != nil {
		return point, err
	}
	point.CallsPerS = float64(calls) / time.Since(start).Seconds()
	point.P50US, point.P99US = percentileUS(lat, 50), percentileUS(lat, 99)
	return point, nil
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
