package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// inflightReport is the last line of the inflight mode. Memory is each
// kind of process's resident set (VmRSS) summed over its processes, idle
// (before any call) and on the plateau (every long call running).
type inflightReport struct {
	Calls       int     `json:"calls"`
	Workers     int     `json:"workers"`
	SlotsPerWkr int     `json:"slots_per_worker"`
	AckWaitMS   int64   `json:"ack_wait_ms"`
	SubmitS     float64 `json:"submit_s"`
	// RunningS is the time from the first submit until every call ran.
	RunningS float64 `json:"running_s"`
	PlateauS float64 `json:"plateau_s"`

	CoordinatorRSSMB     float64 `json:"coordinator_rss_mb"`
	WorkersRSSMB         float64 `json:"workers_rss_mb"`
	ServerRSSMB          float64 `json:"server_rss_mb"`
	ServerMemMB          float64 `json:"server_varz_mem_mb"`
	CoordinatorIdleRSSMB float64 `json:"coordinator_idle_rss_mb"`
	WorkersIdleRSSMB     float64 `json:"workers_idle_rss_mb"`
	ServerIdleRSSMB      float64 `json:"server_idle_rss_mb"`

	// The server's messages per second on the plateau (its /varz
	// in_msgs and out_msgs, less what the bench's own observer received),
	// and those of them that are leases (InProgress acknowledgements, one
	// inbound message each) and progress events (one inbound message each,
	// and the stream's acknowledgement outbound).
	ServerInMsgsPerS  float64 `json:"server_in_msgs_per_s"`
	ServerOutMsgsPerS float64 `json:"server_out_msgs_per_s"`
	LeasesPerS        float64 `json:"leases_per_s"`
	ProgressPerS      float64 `json:"progress_per_s"`
	LeaseShareOfIn    float64 `json:"lease_share_of_in"`
	ProgressShareOfIn float64 `json:"progress_share_of_in"`

	// A short no-op call on the realistic path, one at a time, before the
	// long calls (idle) and while they run.
	ShortCalls     int     `json:"short_calls"`
	ShortIdleP50US float64 `json:"short_idle_p50_us"`
	ShortIdleP99US float64 `json:"short_idle_p99_us"`
	ShortP50US     float64 `json:"short_p50_us"`
	ShortP99US     float64 `json:"short_p99_us"`

	// Watchers of the long calls (each through the SDK's Watch), the
	// progress events they received a second on the plateau, and the CPU
	// the server and the coordinator used a second meanwhile.
	Watchers            int     `json:"watchers"`
	WatchVia            string  `json:"watch_via"`
	WatchedProgressPerS float64 `json:"watched_progress_per_s"`
	WatchersCaughtUpS   float64 `json:"watchers_caught_up_s"`
	ServerCPUPerS       float64 `json:"server_cpu_s_per_s"`
	CoordinatorCPUPerS  float64 `json:"coordinator_cpu_s_per_s"`
}

// runInflight puts many long-running calls in flight at once and measures
// what holding them costs.
func runInflight(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench inflight", flag.ContinueOnError)
	calls := fs.Int("calls", 10000, "long-running calls in flight at once")
	workers := fs.Int("workers", 4, "worker processes")
	slots := fs.Int("slots", 0, "sleep slots of each worker process (default: the calls shared among the workers)")
	plateau := fs.Duration("plateau", 20*time.Second, "how long the server's messages are counted once every call runs")
	shortCalls := fs.Int("short-calls", 1000, "short calls measured one at a time, idle and on the plateau")
	submitters := fs.Int("submitters", 64, "concurrent submitters of the long calls")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "the workers' ack wait (the worker's default): a call's lease is renewed every third of it")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix and resource-name stem of the Toolbus measured")
	watchers := fs.Int("watchers", 0, "long calls followed through the SDK's Watch (their progress events) on the plateau")
	watchVia := fs.String("watch-via", "stream", "how the watchers follow their calls: stream (an ordered consumer each, as a client whose account has JetStream does) or coordinator (calls.events with a wait, as Options.CoordinatorReads does)")
	if err := parse(fs, args); err != nil {
		return err
	}
	names, err := messages.NewNames(*prefix)
	if err != nil {
		return err
	}
	if *calls < 1 || *workers < 1 || *shortCalls < 1 || *submitters < 1 || *ackWait <= 0 || *plateau <= 0 || *slots < 0 || *watchers < 0 || *watchers > *calls {
		return exitErrorf("inflight: --calls, --workers, --short-calls, --submitters, --ack-wait and --plateau must be positive, --slots not negative, --watchers from 0 to --calls")
	}
	if *watchVia != "stream" && *watchVia != "coordinator" {
		return exitErrorf("inflight: --watch-via is stream or coordinator, not %q", *watchVia)
	}
	if *slots == 0 {
		*slots = (*calls + *workers - 1) / *workers
	}
	r := inflightReport{Calls: *calls, Workers: *workers, SlotsPerWkr: *slots, AckWaitMS: ackWait.Milliseconds(), ShortCalls: *shortCalls, Watchers: *watchers, WatchVia: *watchVia}
	s, err := startStack(stackConfig{names: names, coordinators: 1, workers: *workers, slots: 64, sleepSlots: *slots, sleepConcurrency: *calls, ackWait: *ackWait})
	if err != nil {
		return err
	}
	defer s.stop()
	tb, err := s.agent(ctx)
	if err != nil {
		return err
	}
	// Idle: memory, and the short call alone.
	r.CoordinatorIdleRSSMB, r.WorkersIdleRSSMB, r.ServerIdleRSSMB = s.rssMB()
	lat, err := sequential(ctx, *shortCalls, tb.call)
	if err != nil {
		return err
	}
	r.ShortIdleP50US, r.ShortIdleP99US = percentileUS(lat, 50), percentileUS(lat, 99)

	observer, err := s.connect()
	if err != nil {
		return err
	}
	startedFilter, err := names.Filters().EventKind(messages.EventStarted)
	if err != nil {
		return err
	}
	var startedCount atomic.Int64
	allRunning := make(chan struct{})
	var once sync.Once
	started, err := observer.Subscribe(startedFilter, func(*nats.Msg) {
		if startedCount.Add(1) == int64(*calls) {
			once.Do(func() { close(allRunning) })
		}
	})
	if err != nil {
		return err
	}
	if err := observer.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "submitting %d long calls from %d submitters\n", *calls, *submitters)
	nc, err := s.connect()
	if err != nil {
		return err
	}
	submitter, err := client.New(nc, client.Options{Prefix: names.Prefix()})
	if err != nil {
		return err
	}
	// The calls sleep until the stack is stopped: far longer than the run.
	sleep := messages.JSON(`{"seconds":3600}`)
	begin := time.Now()
	ids, err := submitLongCalls(ctx, submitter, *calls, *submitters, sleep)
	if err != nil {
		return err
	}
	r.SubmitS = time.Since(begin).Seconds()
	select {
	case <-allRunning:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%d of %d calls started within 5 minutes of their submits", startedCount.Load(), *calls)
	case <-ctx.Done():
		return ctx.Err()
	}
	r.RunningS = time.Since(begin).Seconds()
	if err := started.Unsubscribe(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d calls running after %.1fs (submitted in %.1fs); counting the server's messages for %s\n", *calls, r.RunningS, r.SubmitS, *plateau)

	watcher, err := client.New(nc, client.Options{Prefix: names.Prefix(), CoordinatorReads: *watchVia == "coordinator"})
	if err != nil {
		return err
	}
	watched, caughtUp, stopWatching := watchCalls(ctx, watcher, ids[:*watchers])
	defer stopWatching()
	// The plateau begins once every watcher follows live: their first
	// reads of their calls' histories are measured apart.
	watchBegan := time.Now()
	select {
	case <-caughtUp:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("the %d watchers did not all follow their calls live within 5 minutes", *watchers)
	case <-ctx.Done():
		return ctx.Err()
	}
	r.WatchersCaughtUpS = time.Since(watchBegan).Seconds()
	if *watchers > 0 {
		fmt.Fprintf(os.Stderr, "%d watchers (via the %s) follow their calls live after %.1fs\n", *watchers, *watchVia, r.WatchersCaughtUpS)
	}

	// The plateau: every call sleeps, renews its lease and reports progress.
	if err := measurePlateau(ctx, s, observer, names, *plateau, watched, &r); err != nil {
		return err
	}

	// The short call, while the long ones run.
	if lat, err = sequential(ctx, *shortCalls, tb.call); err != nil {
		return err
	}
	r.ShortP50US, r.ShortP99US = percentileUS(lat, 50), percentileUS(lat, 99)

	r.print(*ackWait)
	return nil
}

// submitLongCalls submits n calls of the sleep tool from submitters
// concurrent submitters and returns their IDs.
func submitLongCalls(ctx context.Context, submitter *client.Client, n, submitters int, sleep messages.JSON) ([]string, error) {
	var mu sync.Mutex
	ids := make([]string, 0, n)
	if _, err := concurrentLatencies(ctx, n, submitters, func(ctx context.Context) error {
		ref, err := submitter.Submit(ctx, messages.SubmitRequest{Tool: sleepNamespace + "-sleep", Arguments: sleep, TimeoutMS: 2 * time.Hour.Milliseconds()})
		if err == nil {
			mu.Lock()
			ids = append(ids, ref.CallID)
			mu.Unlock()
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("submit a long call: %w", err)
	}
	return ids, nil
}

// measurePlateau counts, for the plateau's length, the server's messages
// (the leases and progress events apart), the CPU of the server and the
// coordinator, and the progress events the watchers received, and reads
// the processes' memory after it, into r.
func measurePlateau(ctx context.Context, s *stack, observer *nats.Conn, names messages.Names, plateau time.Duration, watched *atomic.Int64, r *inflightReport) error {
	progressFilter, err := names.Filters().EventKind(messages.EventProgress)
	if err != nil {
		return err
	}
	var progress, leases atomic.Int64
	if _, err := observer.Subscribe(progressFilter, func(*nats.Msg) { progress.Add(1) }); err != nil {
		return err
	}
	inProgress := []byte("+WPI")
	// Only a worker's lease renewal sends InProgress, on whichever stream
	// holds the work.
	if _, err := observer.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		if bytes.Equal(m.Data, inProgress) {
			leases.Add(1)
		}
	}); err != nil {
		return err
	}
	if err := observer.Flush(); err != nil {
		return err
	}
	before, err := s.varz(ctx)
	if err != nil {
		return err
	}
	observed0 := observer.Stats().InMsgs
	progress0, leases0, watched0 := progress.Load(), leases.Load(), watched.Load()
	serverCPU0, coordinatorCPU0, _, _ := s.cpu()
	t0 := time.Now()
	select {
	case <-time.After(plateau):
	case <-ctx.Done():
		return ctx.Err()
	}
	after, err := s.varz(ctx)
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	serverCPU1, coordinatorCPU1, _, _ := s.cpu()
	r.ServerCPUPerS = (serverCPU1 - serverCPU0).Seconds() / secs
	r.CoordinatorCPUPerS = (coordinatorCPU1 - coordinatorCPU0).Seconds() / secs
	r.WatchedProgressPerS = float64(watched.Load()-watched0) / secs
	observed := float64(observer.Stats().InMsgs - observed0)
	r.PlateauS = secs
	r.ServerInMsgsPerS = float64(after.InMsgs-before.InMsgs) / secs
	r.ServerOutMsgsPerS = (float64(after.OutMsgs-before.OutMsgs) - observed) / secs
	r.LeasesPerS = float64(leases.Load()-leases0) / secs
	r.ProgressPerS = float64(progress.Load()-progress0) / secs
	if r.ServerInMsgsPerS > 0 {
		r.LeaseShareOfIn = r.LeasesPerS / r.ServerInMsgsPerS
		r.ProgressShareOfIn = r.ProgressPerS / r.ServerInMsgsPerS
	}
	r.CoordinatorRSSMB, r.WorkersRSSMB, r.ServerRSSMB = s.rssMB()
	r.ServerMemMB = float64(after.Mem) / (1 << 20)
	return nil
}

// print writes the report's table on standard error and its JSON line on
// standard output.
func (r *inflightReport) print(ackWait time.Duration) {
	fmt.Fprintf(os.Stderr, "\n%d calls in flight on %d workers × %d slots (ack wait %s: a lease every %s)\n", r.Calls, r.Workers, r.SlotsPerWkr, ackWait, ackWait/3)
	fmt.Fprintf(os.Stderr, "%-28s %10s %10s\n", "memory (RSS, MB)", "idle", "in flight")
	fmt.Fprintf(os.Stderr, "%-28s %10.1f %10.1f\n", "coordinator", r.CoordinatorIdleRSSMB, r.CoordinatorRSSMB)
	fmt.Fprintf(os.Stderr, "%-28s %10.1f %10.1f\n", fmt.Sprintf("workers (%d, summed)", r.Workers), r.WorkersIdleRSSMB, r.WorkersRSSMB)
	fmt.Fprintf(os.Stderr, "%-28s %10.1f %10.1f (varz mem %.1f)\n", "server", r.ServerIdleRSSMB, r.ServerRSSMB, r.ServerMemMB)
	fmt.Fprintf(os.Stderr, "server messages/s over %.0fs: in %.0f (leases %.0f = %.0f%%, progress %.0f = %.0f%%), out %.0f\n",
		r.PlateauS, r.ServerInMsgsPerS, r.LeasesPerS, 100*r.LeaseShareOfIn, r.ProgressPerS, 100*r.ProgressShareOfIn, r.ServerOutMsgsPerS)
	fmt.Fprintf(os.Stderr, "CPU a second on the plateau: server %.2f s, coordinator %.2f s; %d watchers (via the %s) received %.0f progress events a second\n", r.ServerCPUPerS, r.CoordinatorCPUPerS, r.Watchers, r.WatchVia, r.WatchedProgressPerS)
	fmt.Fprintf(os.Stderr, "short call, one at a time: idle p50 %.0fµs p99 %.0fµs; in flight p50 %.0fµs p99 %.0fµs\n", r.ShortIdleP50US, r.ShortIdleP99US, r.ShortP50US, r.ShortP99US)
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

// rssMB sums the resident sets of the coordinators, of the workers and of
// the server, in MB.
func (s *stack) rssMB() (coordinators, workers, server float64) {
	sum := func(ps []*process) float64 {
		var kb int64
		for _, p := range ps {
			kb += p.rssKB()
		}
		return float64(kb) / 1024
	}
	return sum(s.coordinators), sum(s.workers), sum([]*process{s.server})
}

// watchCalls follows each call through the SDK's Watch, counting the
// progress events received, until stop is called. caughtUp is closed once
// every watcher has read its call's history and a progress event reported
// after the watching began.
func watchCalls(ctx context.Context, c *client.Client, callIDs []string) (received *atomic.Int64, caughtUp <-chan struct{}, stop func()) {
	received = new(atomic.Int64)
	began := time.Now()
	wctx, cancel := context.WithCancel(ctx)
	var wg, live sync.WaitGroup
	live.Add(len(callIDs))
	for _, id := range callIDs {
		wg.Go(func() {
			caught := false
			defer func() {
				if !caught {
					live.Done()
				}
			}()
			for ev, err := range c.Watch(wctx, id) {
				if err != nil {
					return
				}
				if ev.Progress != nil {
					received.Add(1)
					if !caught && !ev.Time.Before(began) {
						caught = true
						live.Done()
					}
				}
			}
		})
	}
	all := make(chan struct{})
	go func() { live.Wait(); close(all) }()
	return received, all, func() { cancel(); wg.Wait() }
}
