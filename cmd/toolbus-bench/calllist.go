package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// callsListReport is the last line of calls-list: the latency of a page
// of the execution log, by filter, with the stream holding Calls calls.
type callsListReport struct {
	Calls     int     `json:"calls"`
	Events    uint64  `json:"events"`
	Pages     int     `json:"pages"`
	Limit     int     `json:"limit"`
	StoreSecs float64 `json:"store_s"`
	// Each filter's pages: from the newest call down, following the
	// cursor, and from a random point of the log's history (until).
	Filters []callsListFigure `json:"filters"`
	// CallsGet is calls.get of a random stored call, measured in the same
	// run: the reference for how loaded the machine was.
	CallsGet callsListFigure `json:"calls_get"`
}

type callsListFigure struct {
	Filter string  `json:"filter"`
	From   string  `json:"from"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	// CPUMS is the process's CPU time per page, user and system: the
	// server's, the coordinator's and the client's work, all in this
	// process.
	CPUMS float64 `json:"cpu_ms"`
	// Calls is the mean number of calls per page (a page may be cut short
	// by the scan budget).
	Calls float64 `json:"calls_per_page"`
}

// callsListNamespaces and callsListAgents spread the stored calls; one
// call in callsListFailedEvery fails.
const (
	callsListNamespaces  = 4
	callsListAgents      = 10
	callsListFailedEvery = 10
)

// runCallsList stores finished calls in the events stream as the call
// path writes them, then measures calls.list through a coordinator.
func runCallsList(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench calls-list", flag.ContinueOnError)
	calls := fs.Int("calls", 1_000_000, "finished calls to store")
	pages := fs.Int("pages", 200, "pages measured per filter and starting point")
	limit := fs.Int("limit", messages.DefaultCallsListLimit, "calls per page")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the page measurements to this file")
	dataDir := fs.String("data", "", "keep the server's store in this directory, and reuse the calls a previous run stored there (to compare builds on the same data)")
	if err := parse(fs, args); err != nil {
		return err
	}
	dir := *dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "toolbus-bench-calls-list-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: dir})
	if err != nil {
		return err
	}
	defer srv.Stop()
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	connect := func() (*nats.Conn, error) {
		nc, err := nats.Connect(srv.URL())
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	coordConn, err := connect()
	if err != nil {
		return err
	}
	coord, err := coordinator.New(coordinator.Config{Conn: coordConn, Logger: quiet, NoBuiltinTools: true})
	if err != nil {
		return err
	}
	if err := coord.Start(ctx); err != nil {
		return err
	}
	defer coord.Stop(context.Background())
	writerConn, err := connect()
	if err != nil {
		return err
	}
	start := time.Now()
	stored, err := storedCalls(ctx, writerConn, *calls)
	if err != nil {
		return err
	}
	var r callsListReport
	if stored.events == 0 {
		if err := registerSayTools(ctx, connect, quiet); err != nil {
			return err
		}
		start = time.Now()
	}
	// The stored calls are finished: no namespace consumer may hold them
	// as work still to do, which the coordinator's sweep would read again
	// and again once their deadlines pass.
	if err := dropNamespaceConsumers(ctx, writerConn); err != nil {
		return err
	}
	if stored.events == 0 {
		events, err := storeFinishedCalls(ctx, writerConn, *calls)
		if err != nil {
			return err
		}
		r = callsListReport{Calls: *calls, Events: events, Pages: *pages, Limit: *limit, StoreSecs: time.Since(start).Seconds()}
		fmt.Fprintf(os.Stderr, "stored %d calls (%d events) in %.0fs\n", *calls, events, r.StoreSecs)
		stored.oldest, stored.newest = start, time.Now()
	} else {
		r = callsListReport{Calls: *calls, Events: stored.events, Pages: *pages, Limit: *limit}
		fmt.Fprintf(os.Stderr, "reusing the %d calls (%d events) stored in %s\n", *calls, stored.events, dir)
	}

	agentConn, err := connect()
	if err != nil {
		return err
	}
	c, err := client.New(agentConn, client.Options{})
	if err != nil {
		return err
	}
	oldest, newest := stored.oldest, stored.newest
	if err := startProfiles(*cpuProfile, ""); err != nil {
		return err
	}
	filters := []struct {
		name string
		req  messages.CallsListRequest
	}{
		{"none", messages.CallsListRequest{}},
		{"namespace", messages.CallsListRequest{Namespace: "ns1"}},
		{"agent", messages.CallsListRequest{Agent: "agent-3"}},
		{"state", messages.CallsListRequest{States: []messages.CallState{messages.StateFailed}}},
	}
	for _, f := range filters {
		for _, from := range []string{"newest", "history"} {
			fig, err := measurePages(ctx, c, f.req, *limit, *pages, from == "history", oldest, newest)
			if err != nil {
				return fmt.Errorf("%s from %s: %w", f.name, from, err)
			}
			fig.Filter, fig.From = f.name, from
			fmt.Fprintf(os.Stderr, "%-9s from %-7s p50 %6.2f ms  p99 %6.2f ms  cpu %5.2f ms  %.0f calls a page\n", f.name, from, fig.P50MS, fig.P99MS, fig.CPUMS, fig.Calls)
			r.Filters = append(r.Filters, fig)
		}
	}
	if err := stopProfiles(*cpuProfile, ""); err != nil {
		return err
	}
	lat := make([]time.Duration, 0, *pages)
	cpu := processCPU()
	for range *pages {
		id := fmt.Sprintf("bench%010d", rand.IntN(*calls))
		t0 := time.Now()
		if _, err := c.Get(ctx, id); err != nil {
			return fmt.Errorf("calls.get %s: %w", id, err)
		}
		lat = append(lat, time.Since(t0))
	}
	r.CallsGet = callsListFigure{Filter: "calls.get", From: "history", P50MS: percentileUS(lat, 50) / 1000, P99MS: percentileUS(lat, 99) / 1000,
		CPUMS: float64((processCPU() - cpu).Microseconds()) / 1000 / float64(*pages), Calls: 1}
	fmt.Fprintf(os.Stderr, "calls.get of a random call  p50 %6.2f ms  p99 %6.2f ms  cpu %5.2f ms\n", r.CallsGet.P50MS, r.CallsGet.P99MS, r.CallsGet.CPUMS)
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}

// registerSayTools puts the stored calls' tools in the catalog, so that
// arguments are redacted with their schemas as in a live installation:
// a worker registers them and stops before the calls are stored, since
// each stored queued event is a work item it would otherwise run.
func registerSayTools(ctx context.Context, connect func() (*nats.Conn, error), logger *slog.Logger) error {
	workerConn, err := connect()
	if err != nil {
		return err
	}
	w, err := worker.New(worker.Config{Conn: workerConn, Logger: logger})
	if err != nil {
		return err
	}
	for i := range callsListNamespaces {
		say := worker.Func("say", "Says its text.", func(_ context.Context, in noopArgs) (string, error) { return in.Text, nil })
		if err := w.Serve(worker.Namespace{Name: fmt.Sprintf("ns%d", i), Tools: []worker.Tool{say}}); err != nil {
			return err
		}
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	return w.Stop(ctx)
}

// dropNamespaceConsumers deletes the namespaces' consumers the worker of
// registerSayTools created.
func dropNamespaceConsumers(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	names := messages.MustNames("")
	for i := range callsListNamespaces {
		name, err := names.Consumers().Durable(fmt.Sprintf("ns%d", i))
		if err != nil {
			return err
		}
		if err := js.DeleteConsumer(ctx, names.EventsStream(), name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("delete consumer %s: %w", name, err)
		}
	}
	return nil
}

// measurePages times pages of req: following the cursor from the newest
// call, or each from a random time of the log's history.
func measurePages(ctx context.Context, c *client.Client, req messages.CallsListRequest, limit, pages int, history bool, oldest, newest time.Time) (callsListFigure, error) {
	req.Limit = limit
	lat := make([]time.Duration, 0, pages)
	calls := 0
	cpu := processCPU()
	for range pages {
		if history {
			req.Cursor = ""
			req.Until = oldest.Add(time.Duration(rand.Int64N(int64(newest.Sub(oldest)))))
		}
		t0 := time.Now()
		reply, err := c.ListCalls(ctx, req)
		if err != nil {
			return callsListFigure{}, err
		}
		lat = append(lat, time.Since(t0))
		calls += len(reply.Calls)
		// Arguments are listed only when the tool's schema redacted them.
		if len(reply.Calls) > 0 && len(reply.Calls[0].Arguments) == 0 {
			return callsListFigure{}, fmt.Errorf("call %s is listed without its arguments: its tool is missing from the coordinator's catalog", reply.Calls[0].CallID)
		}
		if !history {
			req.Cursor = reply.NextCursor
		}
	}
	return callsListFigure{
		P50MS: percentileUS(lat, 50) / 1000,
		P99MS: percentileUS(lat, 99) / 1000,
		CPUMS: float64((processCPU() - cpu).Microseconds()) / 1000 / float64(pages),
		Calls: float64(calls) / float64(pages),
	}, nil
}

// storeFinishedCalls writes n finished calls, each its queued, started
// and result events as the ledger encodes them, published asynchronously.
// It returns the number of events it stored.
func storeFinishedCalls(ctx context.Context, nc *nats.Conn, n int) (uint64, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, err
	}
	names := messages.MustNames("")
	l := ledger.New(nc, js, names)
	defer l.Close()
	// The coordinator and the worker may have written events of their own.
	before, err := eventsStored(ctx, js, names)
	if err != nil {
		return 0, err
	}
	args := messages.JSON(`{"text":"hello","api_token":"s3cret"}`)
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%callsListNamespaces)
		now := time.Now().UTC()
		id := fmt.Sprintf("bench%010d", i)
		call := &messages.CallRequest{
			CallID: id, Tool: ns + "-say", Namespace: ns, Method: "say", Arguments: args,
			Agent: fmt.Sprintf("agent-%d", i%callsListAgents), Turn: fmt.Sprintf("turn-%d", i/8),
			QueuedAt: now, Deadline: now.Add(10 * time.Minute), MaxAttempts: 3,
		}
		res := &messages.CallResult{CallID: id, Tool: call.Tool, Status: messages.StateCompleted,
			Content: []messages.ContentBlock{messages.TextBlock("hello")}, Attempt: 1, Worker: "bench-worker",
			QueuedAt: now, StartedAt: now, FinishedAt: now.Add(time.Millisecond)}
		if i%callsListFailedEvery == 0 {
			res.Status, res.IsError = messages.StateFailed, true
			res.Error = &messages.ResultError{Code: messages.ResultWorkerError, Message: "the bench says so"}
		}
		for _, ev := range []*messages.CallEvent{
			{CallID: id, Kind: messages.EventQueued, Time: now, Request: call},
			{CallID: id, Kind: messages.EventStarted, Time: now, Attempt: 1, Worker: "bench-worker"},
			{CallID: id, Kind: messages.EventResult, Time: res.FinishedAt, Result: res},
		} {
			msg, err := l.EventMsg(messages.TurnBucket(call.Turn), ns, ev)
			if err != nil {
				return 0, err
			}
			if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
				return 0, err
			}
		}
		if i%100_000 == 99_999 {
			fmt.Fprintf(os.Stderr, "  %d calls\n", i+1)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	stored, err := eventsStored(ctx, js, names)
	if err != nil {
		return 0, err
	}
	if stored-before != uint64(3*n) {
		return 0, fmt.Errorf("the events stream holds %d events more than before; %d were published", stored-before, 3*n)
	}
	return stored - before, nil
}

// storedRun describes the calls a previous run left in the store.
type storedRun struct {
	events         uint64
	oldest, newest time.Time
}

// storedCalls tells whether the store holds the n calls of a previous run
// (zero events if it holds none), and when they were stored.
func storedCalls(ctx context.Context, nc *nats.Conn, n int) (storedRun, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return storedRun{}, err
	}
	s, err := js.Stream(ctx, messages.MustNames("").EventsStream())
	if err != nil {
		return storedRun{}, err
	}
	st := s.CachedInfo().State
	if st.Msgs < uint64(3*n) {
		if st.Msgs > 10 {
			return storedRun{}, fmt.Errorf("the store holds %d events, fewer than %d calls: use a new --data directory", st.Msgs, n)
		}
		return storedRun{}, nil
	}
	return storedRun{events: st.Msgs, oldest: st.FirstTime, newest: st.LastTime}, nil
}

// eventsStored returns the events stream's message count.
func eventsStored(ctx context.Context, js jetstream.JetStream, names messages.Names) (uint64, error) {
	s, err := js.Stream(ctx, names.EventsStream())
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.Msgs, nil
}
