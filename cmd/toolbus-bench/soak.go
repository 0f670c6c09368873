package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// soakReport is the last line of the soak.
type soakReport struct {
	Submitted  int `json:"submitted"`
	Results    int `json:"results"`
	Lost       int `json:"lost"`
	Duplicated int `json:"duplicated"`
	// ResultsObserved counts the calls whose result event a subscriber
	// to the events stream's subjects saw.
	ResultsObserved       int     `json:"results_observed"`
	Failed                int     `json:"failed"`
	Kills                 int     `json:"kills"`
	CallsHitByKills       int     `json:"calls_hit_by_kills"`
	KillToCompletionP50MS float64 `json:"kill_to_completion_p50_ms"`
	KillToCompletionP99MS float64 `json:"kill_to_completion_p99_ms"`
	AckWaitMS             int64   `json:"ack_wait_ms"`
	DurationS             float64 `json:"duration_s"`
}

type workArgs struct {
	MS int `json:"ms"`
}

// soakWorkerCommand is the command line's first word in a worker process
// that the soak starts; it is not for people to type.
const soakWorkerCommand = "soak-worker"

// runSoakWorker is the worker process the soak starts and kills.
func runSoakWorker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench "+soakWorkerCommand, flag.ContinueOnError)
	server := fs.String("server", "", "NATS URL")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix")
	id := fs.String("id", "", "worker ID")
	ackWait := fs.Duration("ack-wait", 2*time.Second, "ack wait")
	if err := parse(fs, args); err != nil {
		return err
	}
	nc, err := nats.Connect(*server)
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := worker.New(worker.Config{Conn: nc, Prefix: *prefix, ID: *id, AckWait: *ackWait, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		return err
	}
	work := worker.Func("work", "Works for the given milliseconds, reporting progress.", func(ctx context.Context, in workArgs) (string, error) {
		d := time.Duration(in.MS) * time.Millisecond
		for i := 1; i <= 4; i++ {
			select {
			case <-ctx.Done():
				return "", context.Cause(ctx)
			case <-time.After(d / 4):
			}
			worker.ReportProgress(ctx, float64(i), 4, "")
		}
		return "done", nil
	})
	if err := w.Serve(worker.Namespace{Name: "soak", Tools: []worker.Tool{work}, Slots: 64, MaxAttempts: 10}); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	return w.Stop(context.Background())
}

// soakConfig is what the soak's flags set.
type soakConfig struct {
	names              messages.Names
	calls, concurrency int
	killEvery, ackWait time.Duration
	workers            int
}

// runSoak submits calls of a tool that works for a random short time while
// worker processes are killed and replaced, and counts what callers see.
func runSoak(ctx context.Context, cfg soakConfig) error {
	calls, concurrency, killEvery, ackWait, workers := cfg.calls, cfg.concurrency, cfg.killEvery, cfg.ackWait, cfg.workers
	resultsFilter, err := cfg.names.Filters().EventKind(messages.EventResult)
	if err != nil {
		return err
	}
	startedFilter, err := cfg.names.Filters().EventKind(messages.EventStarted)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "toolbus-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsserver.Start(natsserver.Config{DataDir: dir})
	if err != nil {
		return err
	}
	defer srv.Stop()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(srv.URL())
		if err != nil {
			panic(err)
		}
		return nc
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	coord, err := coordinator.New(coordinator.Config{Conn: connect(), Prefix: cfg.names.Prefix(), Logger: quiet})
	if err != nil {
		return err
	}
	if err := coord.Start(ctx); err != nil {
		return err
	}
	defer coord.Stop(context.Background())

	// Every result and start published, as a caller subscribed to them sees them.
	observer := connect()
	defer observer.Close()
	var mu sync.Mutex
	resultsSeen := map[string]int{}
	runningOn := map[string]string{}
	finishedAt := map[string]time.Time{}
	if _, err := observer.Subscribe(resultsFilter, func(m *nats.Msg) {
		var ev messages.CallEvent
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &ev); err == nil {
			mu.Lock()
			resultsSeen[ev.CallID]++
			finishedAt[ev.CallID] = time.Now()
			mu.Unlock()
		}
	}); err != nil {
		return err
	}
	if _, err := observer.Subscribe(startedFilter, func(m *nats.Msg) {
		var ev messages.CallEvent
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &ev); err == nil {
			mu.Lock()
			runningOn[ev.CallID] = ev.Worker
			mu.Unlock()
		}
	}); err != nil {
		return err
	}

	type proc struct {
		id  string
		cmd *exec.Cmd
	}
	var procs []*proc
	n := 0
	startWorker := func() (*proc, error) {
		n++
		id := fmt.Sprintf("soak-%d", n)
		cmd := exec.Command(self, soakWorkerCommand, "--server", srv.URL(), "--prefix", cfg.names.Prefix(), "--id", id, "--ack-wait", ackWait.String())
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil {
			return nil, fmt.Errorf("worker %s did not start: %w", id, err)
		}
		return &proc{id: id, cmd: cmd}, nil
	}
	for range workers {
		p, err := startWorker()
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	defer func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	}()

	c, err := client.New(connect(), client.Options{Prefix: cfg.names.Prefix(), Agent: "soak"})
	if err != nil {
		return err
	}
	start := time.Now()
	var submitted, failed, received atomic.Int64
	ids := make(chan string, calls)
	var wg sync.WaitGroup
	var next atomic.Int64
	rng := rand.New(rand.NewPCG(1, 2))
	durations := make([]int, calls)
	for i := range durations {
		durations[i] = 50 + rng.IntN(450)
	}
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(calls) {
					return
				}
				args, _ := json.Marshal(workArgs{MS: durations[i]})
				r, err := c.Submit(ctx, messages.SubmitRequest{Tool: "soak-work", Arguments: args, TimeoutMS: time.Hour.Milliseconds()})
				if err != nil {
					fmt.Fprintln(os.Stderr, "submit:", err)
					continue
				}
				submitted.Add(1)
				ids <- r.CallID
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				res, err := c.Wait(wctx, r.CallID)
				cancel()
				if err != nil {
					fmt.Fprintf(os.Stderr, "call %s: no result: %v\n", r.CallID, err)
					continue
				}
				received.Add(1)
				if res.Status != messages.StateCompleted {
					if failed.Add(1) <= 3 {
						fmt.Fprintf(os.Stderr, "call %s: %s %v\n", r.CallID, res.Status, res.Error)
					}
				}
			}
		}()
	}

	// Kill a random worker every killEvery and start a replacement.
	var kills []struct {
		at     time.Time
		worker string
		calls  []string
	}
	stopKilling := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		t := time.NewTicker(killEvery)
		defer t.Stop()
		for {
			select {
			case <-stopKilling:
				return
			case <-t.C:
			}
			i := rng.IntN(len(procs))
			victim := procs[i]
			_ = victim.cmd.Process.Signal(syscall.SIGKILL)
			at := time.Now()
			_ = victim.cmd.Wait()
			mu.Lock()
			var hit []string
			for id, w := range runningOn {
				if w == victim.id && resultsSeen[id] == 0 {
					hit = append(hit, id)
				}
			}
			mu.Unlock()
			kills = append(kills, struct {
				at     time.Time
				worker string
				calls  []string
			}{at, victim.id, hit})
			fmt.Fprintf(os.Stderr, "killed %s holding %d calls\n", victim.id, len(hit))
			p, err := startWorker()
			if err != nil {
				fmt.Fprintln(os.Stderr, "restart:", err)
				return
			}
			procs[i] = p
		}
	}()
	wg.Wait()
	close(stopKilling)
	<-killerDone
	close(ids)

	r := soakReport{
		Submitted: int(submitted.Load()),
		Results:   int(received.Load()),
		Lost:      int(submitted.Load() - received.Load()),
		Failed:    int(failed.Load()),
		Kills:     len(kills),
		AckWaitMS: ackWait.Milliseconds(),
		DurationS: time.Since(start).Seconds(),
	}
	// Let the observer see the last results published, then count what it
	// saw twice. It sees them within moments; the bound is for a busy
	// machine, and is reached only when a result never comes.
	var all []string
	for id := range ids {
		all = append(all, id)
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		missing := slices.ContainsFunc(all, func(id string) bool { return resultsSeen[id] == 0 })
		mu.Unlock()
		if !missing {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range all {
		if resultsSeen[id] > 0 {
			r.ResultsObserved++
		}
		if resultsSeen[id] > 1 {
			r.Duplicated++
		}
	}
	var lat []time.Duration
	for _, k := range kills {
		for _, id := range k.calls {
			if f, ok := finishedAt[id]; ok {
				lat = append(lat, f.Sub(k.at))
			}
		}
		r.CallsHitByKills += len(k.calls)
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		r.KillToCompletionP50MS = float64(lat[len(lat)/2].Milliseconds())
		r.KillToCompletionP99MS = float64(lat[(len(lat)*99+99)/100-1].Milliseconds())
	}
	fmt.Fprintf(os.Stderr, "submitted %d, results %d, lost %d, duplicated %d, failed %d, %d kills hit %d calls, kill to completion p50 %.0fms p99 %.0fms\n",
		r.Submitted, r.Results, r.Lost, r.Duplicated, r.Failed, r.Kills, r.CallsHitByKills, r.KillToCompletionP50MS, r.KillToCompletionP99MS)
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}
