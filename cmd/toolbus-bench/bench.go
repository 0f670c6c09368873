package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// benchReport is the last line the bench prints.
type benchReport struct {
	Calls                 int     `json:"calls"`
	Concurrency           int     `json:"concurrency"`
	Rounds                int     `json:"rounds"`
	BaselineSeqP50US      float64 `json:"baseline_seq_p50_us"`
	ToolbusSeqP50US       float64 `json:"toolbus_seq_p50_us"`
	BaselineSeqP99US      float64 `json:"baseline_seq_p99_us"`
	ToolbusSeqP99US       float64 `json:"toolbus_seq_p99_us"`
	BaselineC64CallsPerS  float64 `json:"baseline_c64_calls_per_s"`
	ToolbusC64CallsPerS   float64 `json:"toolbus_c64_calls_per_s"`
	SeqP50Ratio           float64 `json:"seq_p50_ratio"`
	ThroughputRatio       float64 `json:"throughput_ratio"`
	ToolbusJetStreamWrite int     `json:"toolbus_jetstream_writes_per_call"`
	// ToolbusAuditWrites is the messages the audit stream stored per call,
	// counted apart: the records of allowed calls, copied from their
	// queued events in batches off the call's path, kept where no one can
	// delete them.
	ToolbusAuditWrites     float64 `json:"toolbus_audit_writes_per_call"`
	BaselineJetStreamWrite int     `json:"baseline_jetstream_writes_per_call"`
	// The messages and bytes the server received from and sent to every
	// process per sequential call, on each path (the server's counts, so
	// JetStream's own acknowledgements and the copy of the audit records
	// included).
	BaselineMsgsPerCall  float64 `json:"baseline_msgs_per_call"`
	ToolbusMsgsPerCall   float64 `json:"toolbus_msgs_per_call"`
	BaselineBytesPerCall float64 `json:"baseline_bytes_per_call"`
	ToolbusBytesPerCall  float64 `json:"toolbus_bytes_per_call"`
	// Auth says whether the run used a deployment's users and identities
	// (--auth): each process connected as its role.
	Auth bool `json:"auth,omitempty"`
	// Path is the call path measured: "realistic" (an agent in a turn,
	// under exposure rules and a policy) or "bare" (--bare).
	Path string `json:"path"`
	// The CPU time of the whole process (the server, the coordinator, the
	// worker and the callers all run in it) per call during the throughput
	// measurements, median of the rounds: at 64 callers the calls are
	// bound by the cores, so the throughput ratio follows the ratio of
	// these two.
	BaselineCPUUSPerCall float64 `json:"baseline_cpu_us_per_call"`
	ToolbusCPUUSPerCall  float64 `json:"toolbus_cpu_us_per_call"`
}

// runBench measures the call path against the baseline or, with --soak,
// runs the soak.
func runBench(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	calls := fs.Int("calls", 2000, "calls per measurement and round (soak: calls in all)")
	rounds := fs.Int("rounds", 3, "rounds; each measures the baseline and Toolbus, in alternating order")
	concurrency := fs.Int("concurrency", 64, "concurrent callers in the throughput measurement (soak: callers)")
	slots := fs.Int("slots", 64, "worker slots")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix and resource-name stem of the Toolbus measured")
	soak := fs.Bool("soak", false, "soak mode: kill and restart worker processes while calls run")
	killEvery := fs.Duration("kill-every", 3*time.Second, "soak: how often a worker process is killed")
	ackWait := fs.Duration("ack-wait", 2*time.Second, "soak: how long a killed worker's calls wait before redelivery")
	workers := fs.Int("workers", 2, "soak: worker processes")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the Toolbus throughput run to this file")
	settle := fs.Duration("settle", coordinator.DefaultSweepInterval+3*coordinator.DefaultAuditCopyInterval, "how long the count of messages and bytes a call waits after its calls for the work that follows them (the audit copier's batches, a sweep's reads)")
	byConnection := fs.Bool("traffic-by-connection", false, "print, for the count of messages a call, each connection's share (messages in and out per call, and the subjects it subscribes to)")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the Toolbus throughput run to this file")
	authConfig := fs.String("auth", "", "run the server with this deployment configuration (accounts and users, e.g. deploy/nats/users.conf); the coordinator, the worker and the agent each connect as their role's user")
	bare := fs.Bool("bare", false, "measure the bare call path: no agent, turn, workspace or policy (by default every call is an agent's, in a turn, under exposure rules and a 20-rule policy)")
	identitiesFile := fs.String("identities", "", "with --auth: the coordinator's identities file (e.g. deploy/nats/identities.yaml)")
	if err := parse(fs, args); err != nil {
		return err
	}
	names, err := messages.NewNames(*prefix)
	if err != nil {
		return err
	}
	if *soak {
		return runSoak(ctx, soakConfig{names: names, calls: *calls, concurrency: *concurrency, killEvery: *killEvery, ackWait: *ackWait, workers: *workers})
	}
	dir, err := os.MkdirTemp("", "toolbus-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var auth *authSetup
	if *authConfig != "" {
		if *identitiesFile == "" {
			return fmt.Errorf("--auth needs --identities")
		}
		if auth, err = newAuthSetup(*authConfig, *identitiesFile, dir); err != nil {
			return err
		}
		defer auth.close()
	}
	srvCfg := natsserver.Config{DataDir: dir}
	if auth != nil {
		srvCfg.ConfigFile = auth.configFile
	}
	srv, err := natsserver.Start(srvCfg)
	if err != nil {
		return err
	}
	defer srv.Stop()
	connectAs := func(role string) func() (*nats.Conn, error) {
		if auth == nil {
			return func() (*nats.Conn, error) { return nats.Connect(srv.URL()) }
		}
		user := map[string]string{"baseline": "bench_baseline", "coordinator": "coordinator", "worker": auth.worker, "agent": auth.agentUser}[role]
		return func() (*nats.Conn, error) { return auth.connect(srv.URL(), user) }
	}

	base, err := newBaseline(ctx, connectAs("baseline"), *slots)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	defer base.close()
	var realistic *realisticSetup
	if !*bare {
		realistic = &realisticSetup{dir: dir}
	}
	tb, err := newToolbusBench(ctx, connectAs, names, auth, realistic, *slots)
	if err != nil {
		return fmt.Errorf("toolbus: %w", err)
	}
	defer tb.close()

	// Warm both paths before measuring.
	if _, err := sequential(ctx, 200, base.call); err != nil {
		return err
	}
	if _, err := sequential(ctx, 200, tb.call); err != nil {
		return err
	}
	r := benchReport{Calls: *calls, Concurrency: *concurrency, Rounds: max(*rounds, 1), BaselineJetStreamWrite: 2, Auth: auth != nil, Path: "bare"}
	if !*bare {
		r.Path = "realistic"
	}
	// The writes of a call are counted, not assumed: the messages the
	// Toolbus streams stored during warm-up calls, per call.
	counter, err := connectAs("coordinator")()
	if err != nil {
		return err
	}
	defer counter.Close()
	// settle is how long traffic waits after the calls for what follows
	// them: the audit copier's batches, and for Toolbus a sweep, whose
	// reads of settled calls are a cost of each call too. What the
	// processes send while idle (heartbeats, the copier's polls, the
	// sweep's own requests) is measured over as long again without calls,
	// and taken off.
	traffic := func(call func(context.Context) error, settle time.Duration) (msgs, bytes float64, err error) {
		const n = 500
		var conns [2]map[uint64]connTraffic // the busy window's, then the idle one's
		window := func(work func() error) (msgs, bytes uint64, took time.Duration, err error) {
			before, err := srv.Varz(nil)
			if err != nil {
				return 0, 0, 0, err
			}
			connsBefore, err := connectionTraffic(srv, *byConnection)
			if err != nil {
				return 0, 0, 0, err
			}
			t0 := time.Now()
			if err := work(); err != nil {
				return 0, 0, 0, err
			}
			took = time.Since(t0)
			after, err := srv.Varz(nil)
			if err != nil {
				return 0, 0, 0, err
			}
			connsAfter, err := connectionTraffic(srv, *byConnection)
			if err != nil {
				return 0, 0, 0, err
			}
			if conns[0] == nil {
				conns[0] = trafficSince(connsBefore, connsAfter)
			} else {
				conns[1] = trafficSince(connsBefore, connsAfter)
			}
			return uint64(after.InMsgs - before.InMsgs + after.OutMsgs - before.OutMsgs), uint64(after.InBytes - before.InBytes + after.OutBytes - before.OutBytes), took, nil
		}
		// What earlier calls (the warm-up's) left to follow them is done
		// before the count starts, or the first sweep's reads of them
		// would be counted as these calls'.
		time.Sleep(settle)
		busyMsgs, busyBytes, took, err := window(func() error {
			if _, err := sequential(ctx, n, call); err != nil {
				return err
			}
			time.Sleep(settle)
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		idleMsgs, idleBytes, _, err := window(func() error { time.Sleep(took); return nil })
		if err != nil {
			return 0, 0, err
		}
		if *byConnection {
			printConnectionTraffic(conns[0], conns[1], n)
		}
		return (float64(busyMsgs) - float64(idleMsgs)) / n, (float64(busyBytes) - float64(idleBytes)) / n, nil
	}
	if r.BaselineMsgsPerCall, r.BaselineBytesPerCall, err = traffic(base.call, min(*settle, 3*coordinator.DefaultAuditCopyInterval)); err != nil {
		return err
	}
	if r.ToolbusMsgsPerCall, r.ToolbusBytesPerCall, err = traffic(tb.call, *settle); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "per sequential call, in and out of the server\n  baseline %.1f messages, %.0f bytes\n  toolbus  %.1f messages, %.0f bytes\n", r.BaselineMsgsPerCall, r.BaselineBytesPerCall, r.ToolbusMsgsPerCall, r.ToolbusBytesPerCall)
	if r.ToolbusJetStreamWrite, r.ToolbusAuditWrites, err = writesPerCall(ctx, counter, names, 100, tb.call); err != nil {
		return fmt.Errorf("count writes per call: %w", err)
	}
	// The machine's background load drifts; measuring the two in turns,
	// in alternating order, spreads the drift over both.
	var bl, tl []time.Duration
	var bRates, tRates, bCPU, tCPU []float64
	for round := range r.Rounds {
		fmt.Fprintf(os.Stderr, "round %d: sequential %d calls, then %d callers %d calls, each\n", round+1, *calls, *concurrency, *calls)
		order := []bool{false, true} // toolbus?
		if round%2 == 1 {
			order = []bool{true, false}
		}
		for _, toolbus := range order {
			call := base.call
			if toolbus {
				call = tb.call
			}
			lat, err := sequential(ctx, *calls, call)
			if err != nil {
				return err
			}
			profiling := toolbus && round == 0
			if profiling {
				if err := startProfiles(*cpuProfile, *memProfile); err != nil {
					return err
				}
			}
			cpuBefore := processCPU()
			rate, err := concurrent(ctx, *calls, *concurrency, call)
			cpuPerCall := float64((processCPU() - cpuBefore).Microseconds()) / float64(*calls)
			if profiling {
				if perr := stopProfiles(*cpuProfile, *memProfile); perr != nil && err == nil {
					err = perr
				}
			}
			if err != nil {
				return err
			}
			if toolbus {
				tl, tRates, tCPU = append(tl, lat...), append(tRates, rate), append(tCPU, cpuPerCall)
			} else {
				bl, bRates, bCPU = append(bl, lat...), append(bRates, rate), append(bCPU, cpuPerCall)
			}
		}
	}
	r.BaselineSeqP50US, r.BaselineSeqP99US = percentileUS(bl, 50), percentileUS(bl, 99)
	r.ToolbusSeqP50US, r.ToolbusSeqP99US = percentileUS(tl, 50), percentileUS(tl, 99)
	fmt.Fprintf(os.Stderr, "sequential\n  baseline p50 %.0fµs p99 %.0fµs\n  toolbus  p50 %.0fµs p99 %.0fµs\n", r.BaselineSeqP50US, r.BaselineSeqP99US, r.ToolbusSeqP50US, r.ToolbusSeqP99US)
	r.BaselineC64CallsPerS, r.ToolbusC64CallsPerS = median(bRates), median(tRates)
	fmt.Fprintf(os.Stderr, "%d callers (median of %d rounds)\n", *concurrency, r.Rounds)
	r.BaselineCPUUSPerCall, r.ToolbusCPUUSPerCall = median(bCPU), median(tCPU)
	fmt.Fprintf(os.Stderr, "  baseline %.0f calls/s, %.0fµs of CPU a call\n  toolbus  %.0f calls/s, %.0fµs of CPU a call\n", r.BaselineC64CallsPerS, r.BaselineCPUUSPerCall, r.ToolbusC64CallsPerS, r.ToolbusCPUUSPerCall)
	r.SeqP50Ratio = r.ToolbusSeqP50US / r.BaselineSeqP50US
	r.ThroughputRatio = r.ToolbusC64CallsPerS / r.BaselineC64CallsPerS
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}

var profileFile *os.File

// startProfiles starts the CPU profile and raises the allocation sampling rate, as asked.
func startProfiles(cpu, mem string) error {
	if mem != "" {
		runtime.MemProfileRate = 4096
	}
	if cpu == "" {
		return nil
	}
	f, err := os.Create(cpu)
	if err != nil {
		return err
	}
	profileFile = f
	return pprof.StartCPUProfile(f)
}

func stopProfiles(cpu, mem string) error {
	if cpu != "" {
		pprof.StopCPUProfile()
		if err := profileFile.Close(); err != nil {
			return err
		}
	}
	if mem == "" {
		return nil
	}
	f, err := os.Create(mem)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sequential(ctx context.Context, n int, call func(context.Context) error) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := call(ctx); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

func concurrent(ctx context.Context, n, workers int, call func(context.Context) error) (float64, error) {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := call(ctx); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func percentileUS(d []time.Duration, p int) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return float64(s[i].Microseconds())
}

// baseline is the call path written directly on nats.go: publish with a
// message ID to a work-queue stream, a consumer that publishes the result
// to a stream and acknowledges, and the caller receiving the result.
type baseline struct {
	caller, worker *nats.Conn
	js             jetstream.JetStream
	cc             jetstream.ConsumeContext

	// Results arrive on one wildcard subscription, handed to the waiting caller by call ID.
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func newBaseline(ctx context.Context, connect func() (*nats.Conn, error), slots int) (*baseline, error) {
	b := &baseline{waiting: map[string]chan struct{}{}}
	var err error
	if b.caller, err = connect(); err != nil {
		return nil, err
	}
	if b.worker, err = connect(); err != nil {
		return nil, err
	}
	if b.js, err = jetstream.New(b.caller); err != nil {
		return nil, err
	}
	if _, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BASELINE_CALLS", Subjects: []string{"baseline.call.>"}, Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute}); err != nil {
		return nil, err
	}
	if _, err := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BASELINE_RESULTS", Subjects: []string{"baseline.result.>"}}); err != nil {
		return nil, err
	}
	wjs, err := jetstream.New(b.worker)
	if err != nil {
		return nil, err
	}
	cons, err := wjs.CreateOrUpdateConsumer(ctx, "BASELINE_CALLS", jetstream.ConsumerConfig{Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1024})
	if err != nil {
		return nil, err
	}
	if _, err := b.caller.Subscribe("baseline.result.*", func(m *nats.Msg) {
		id := m.Subject[len("baseline.result."):]
		b.mu.Lock()
		ch := b.waiting[id]
		b.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}); err != nil {
		return nil, err
	}
	// Each message is handled in its own goroutine, as many at once as
	// the toolbus worker has slots, so the baseline is not held back by a
	// serial callback.
	sem := make(chan struct{}, slots)
	b.cc, err = cons.Consume(func(msg jetstream.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			id := msg.Headers().Get(jetstream.MsgIDHeader)
			if _, err := wjs.Publish(context.Background(), "baseline.result."+id, msg.Data()); err != nil {
				_ = msg.Nak()
				return
			}
			_ = msg.Ack()
		}()
	}, jetstream.PullMaxMessages(slots))
	return b, err
}

func (b *baseline) call(ctx context.Context) error {
	id := nuid.Next()
	done := make(chan struct{})
	b.mu.Lock()
	b.waiting[id] = done
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.waiting, id)
		b.mu.Unlock()
	}()
	if _, err := b.js.Publish(ctx, "baseline.call.noop", []byte(`{"text":"x"}`), jetstream.WithMsgID(id)); err != nil {
		return err
	}
	// On a loaded machine a result whose write timed out is written
	// again after its call is delivered again: seconds, not a failure.
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("baseline call %s: %w", id, ctx.Err())
	case <-time.After(time.Minute):
		return fmt.Errorf("baseline call %s: no result within a minute", id)
	}
}

func (b *baseline) close() {
	b.cc.Stop()
	b.caller.Close()
	b.worker.Close()
}

// toolbusBench is the full Toolbus call path with a no-op tool.
type toolbusBench struct {
	conns    []*nats.Conn
	tool     string
	agent    string
	turn     string
	turnOpts [][]client.CallOption // one per turn, used round robin
	next     atomic.Uint64
	coord    *coordinator.Coordinator
	worker   *worker.Worker
	client   *client.Client
}

type noopArgs struct {
	Text string `json:"text"`
}

// realisticSetup says where the realistic path's workspace and policy go.
type realisticSetup struct{ dir string }

func newToolbusBench(ctx context.Context, connectAs func(role string) func() (*nats.Conn, error), names messages.Names, auth *authSetup, realistic *realisticSetup, slots int) (*toolbusBench, error) {
	tb := &toolbusBench{tool: "bench-noop", agent: "bench"}
	var connErr error
	conn := func(role string) *nats.Conn {
		nc, err := connectAs(role)()
		if err != nil {
			connErr = fmt.Errorf("connect as %s: %w", role, err)
			return nil
		}
		tb.conns = append(tb.conns, nc)
		return nc
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	coordCfg := coordinator.Config{Conn: conn("coordinator"), Prefix: names.Prefix(), Logger: quiet}
	namespace := "bench"
	if auth != nil {
		coordCfg.Identities = auth.identities
		namespace, tb.agent = auth.namespace, auth.agent
		tb.tool = namespace + "-noop"
	}
	if connErr != nil {
		return nil, connErr
	}
	if realistic != nil {
		if auth == nil {
			tb.agent = realisticAgent
		}
		workspace, policyFile, err := writeRealisticWorkspace(realistic.dir, namespace, tb.agent)
		if err != nil {
			return nil, err
		}
		coordCfg.WorkspaceDir, coordCfg.PolicyFile = workspace, policyFile
		tb.turn = realisticTurn
	}
	var err error
	if tb.coord, err = coordinator.New(coordCfg); err != nil {
		return nil, err
	}
	if err := tb.coord.Start(ctx); err != nil {
		return nil, err
	}
	if tb.worker, err = worker.New(worker.Config{Conn: conn("worker"), Prefix: names.Prefix(), Logger: quiet}); err != nil {
		return nil, err
	}
	tools := []worker.Tool{worker.Func("noop", "Does nothing.", func(ctx context.Context, in noopArgs) (string, error) { return in.Text, nil })}
	if realistic != nil {
		for _, name := range []string{"lookup", "details", "help", "archive"} {
			tools = append(tools, worker.Func(name, "Does nothing, as "+name+".", func(ctx context.Context, in noopArgs) (string, error) { return in.Text, nil }))
		}
	}
	if err := tb.worker.Serve(worker.Namespace{Name: namespace, Tools: tools, Slots: slots}); err != nil {
		return nil, err
	}
	if err := tb.worker.Start(ctx); err != nil {
		return nil, err
	}
	agentConn := conn("agent")
	if connErr != nil {
		return nil, connErr
	}
	clientOpts := client.Options{Prefix: names.Prefix(), Agent: tb.agent}
	if auth != nil {
		// An agent's user receives results on its own route only, and reads
		// through the coordinator: its account has no JetStream.
		clientOpts.Route, clientOpts.CoordinatorReads = auth.route, true
	}
	if tb.client, err = client.New(agentConn, clientOpts); err != nil {
		return nil, err
	}
	if tb.turn != "" {
		if err := tb.selectInTurn(ctx); err != nil {
			return nil, err
		}
	}
	return tb, nil
}

// selectInTurn has the turn select the onDemand tool measured, as a model
// that discovered it would, once the coordinator's catalog has the
// worker's tools, and makes every call in that turn.
func (tb *toolbusBench) selectInTurn(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for i := range realisticTurns {
		turn := fmt.Sprintf("%s-%d", tb.turn, i)
		tb.turnOpts = append(tb.turnOpts, []client.CallOption{client.WithTurn(turn)})
		if err := tb.selectUntil(ctx, turn, i, deadline); err != nil {
			return err
		}
	}
	return nil
}

// realisticTurns is how many turns the calls are spread over, round
// robin: as many as the callers, as if each were a conversation of its own.
const realisticTurns = 64

func (tb *toolbusBench) selectUntil(ctx context.Context, turn string, i int, deadline time.Time) error {
	for {
		_, err := tb.client.Activate(ctx, turn, tb.tool)
		if err == nil {
			if _, err = tb.client.Call(ctx, tb.tool, benchArgs, tb.turnOpts[i]...); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the turn could not select and call %s: %w", tb.tool, err)
		}
		// The catalog the coordinator follows lags the worker's
		// registration by a moment; there is no event to wait on here.
		time.Sleep(50 * time.Millisecond)
	}
}

var benchArgs = messages.JSON(`{"text":"x"}`)

func (tb *toolbusBench) call(ctx context.Context) error {
	var opts []client.CallOption
	if len(tb.turnOpts) > 0 {
		opts = tb.turnOpts[tb.next.Add(1)%uint64(len(tb.turnOpts))]
	}
	res, err := tb.client.Call(ctx, tb.tool, benchArgs, opts...)
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("bench call failed: %v", res.Error)
	}
	return nil
}

func (tb *toolbusBench) close() {
	_ = tb.worker.Stop(context.Background())
	_ = tb.coord.Stop(context.Background())
	for _, nc := range tb.conns {
		nc.Close()
	}
}

// writesPerCall runs calls sequential calls and returns the messages
// stored meanwhile, per call and rounded, in the streams a call's path
// writes to (its durable writes), and apart, in the audit stream. (The
// catalog's heartbeats and the index are not a call's.)
func writesPerCall(ctx context.Context, nc *nats.Conn, names messages.Names, calls int, call func(context.Context) error) (path int, audit float64, err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, err
	}
	stored := func(streams ...string) (uint64, error) {
		var total uint64
		for _, name := range streams {
			s, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				continue
			}
			if err != nil {
				return 0, err
			}
			total += s.CachedInfo().State.Msgs
		}
		return total, nil
	}
	pathStreams := []string{names.EventsStream(), "KV_" + names.TurnsBucket(), "KV_" + names.ApprovalsBucket()}
	pathBefore, err := stored(pathStreams...)
	if err != nil {
		return 0, 0, err
	}
	auditBefore, err := stored(names.Audit().Stream())
	if err != nil {
		return 0, 0, err
	}
	if _, err := sequential(ctx, calls, call); err != nil {
		return 0, 0, err
	}
	pathAfter, err := stored(pathStreams...)
	if err != nil {
		return 0, 0, err
	}
	// The audit records are copied in batches, an interval or so later.
	time.Sleep(3 * coordinator.DefaultAuditCopyInterval)
	auditAfter, err := stored(names.Audit().Stream())
	if err != nil {
		return 0, 0, err
	}
	perCall := func(n uint64) int { return int(math.Round(float64(n) / float64(calls))) }
	return perCall(pathAfter - pathBefore), float64(auditAfter-auditBefore) / float64(calls), nil
}
