package main

// The cost-curve modes (scale, inflight, history) run the server, the
// coordinators and the workers each in an OS process of its own: this
// binary again, in one of the roles below. The roles are not for people
// to type; each prints one line on standard output once it serves.

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

const (
	serverRole      = "nats-server"
	coordinatorRole = "curve-coordinator"
	workerRole      = "curve-worker"

	// curveNamespace holds the realistic path's tools (noop, lookup,
	// details, help, archive); sleepNamespace the long-running sleep.
	curveNamespace = "bench"
	sleepNamespace = "benchsleep"
)

// runServerRole runs the embedded server library in a process of its own,
// with an HTTP monitoring port, and prints "<client URL> <monitoring URL>".
func runServerRole(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench "+serverRole, flag.ContinueOnError)
	dir := fs.String("dir", "", "JetStream store directory")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("%s: --dir is required", serverRole)
	}
	conf := filepath.Join(*dir, "monitor.conf")
	// Port -1 is a free port of the server's choosing.
	if err := os.WriteFile(conf, []byte("http: \"127.0.0.1:-1\"\n"), 0o600); err != nil {
		return err
	}
	srv, err := natsserver.Start(natsserver.Config{DataDir: filepath.Join(*dir, "jetstream"), ConfigFile: conf})
	if err != nil {
		return err
	}
	defer srv.Stop()
	exitWithParent(func() {
		srv.Stop()
		os.RemoveAll(*dir)
	})
	mon := srv.MonitorAddr()
	if mon == nil {
		return fmt.Errorf("%s: the server has no monitoring port", serverRole)
	}
	fmt.Printf("%s http://%s\n", srv.URL(), mon.String())
	<-ctx.Done()
	return nil
}

// runCoordinatorRole runs a coordinator with the realistic path's
// workspace and policy, and prints "ready".
func runCoordinatorRole(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench "+coordinatorRole, flag.ContinueOnError)
	server := fs.String("server", "", "NATS URL")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix")
	workspace := fs.String("workspace", "", "exposure workspace directory")
	policyFile := fs.String("policy", "", "policy file")
	if err := parse(fs, args); err != nil {
		return err
	}
	nc, err := nats.Connect(*server)
	if err != nil {
		return err
	}
	defer nc.Close()
	exitWithParent(nil)
	c, err := coordinator.New(coordinator.Config{Conn: nc, Prefix: *prefix, WorkspaceDir: *workspace, PolicyFile: *policyFile, Logger: quietLogger()})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return c.Stop(stop)
}

type sleepArgs struct {
	Seconds int `json:"seconds"`
}

// runWorkerRole runs a worker of the realistic path's no-op tools and,
// with --sleep-slots, of a sleep that reports progress every second; it
// prints "ready".
func runWorkerRole(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench "+workerRole, flag.ContinueOnError)
	server := fs.String("server", "", "NATS URL")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix")
	id := fs.String("id", "", "worker ID")
	slots := fs.Int("slots", 64, "slots of the no-op namespace")
	sleepSlots := fs.Int("sleep-slots", 0, "slots of the sleep namespace; 0 serves no sleep")
	sleepConcurrency := fs.Int("sleep-concurrency", 0, "the sleep namespace's calls in progress across workers (its consumer's max ack pending)")
	ackWait := fs.Duration("ack-wait", 0, "how long a call may go without a lease renewal (default: the worker's)")
	if err := parse(fs, args); err != nil {
		return err
	}
	nc, err := nats.Connect(*server)
	if err != nil {
		return err
	}
	defer nc.Close()
	exitWithParent(nil)
	w, err := worker.New(worker.Config{Conn: nc, Prefix: *prefix, ID: *id, AckWait: *ackWait, Logger: quietLogger()})
	if err != nil {
		return err
	}
	var tools []worker.Tool
	for _, name := range []string{"noop", "lookup", "details", "help", "archive"} {
		tools = append(tools, worker.Func(name, "Does nothing, as "+name+".", func(ctx context.Context, in noopArgs) (string, error) { return in.Text, nil }))
	}
	if err := w.Serve(worker.Namespace{Name: curveNamespace, Tools: tools, Slots: *slots}); err != nil {
		return err
	}
	if *sleepSlots > 0 {
		sleep := worker.Func("sleep", "Sleeps for the given seconds, reporting progress every second.", func(ctx context.Context, in sleepArgs) (string, error) {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for i := 1; i <= in.Seconds; i++ {
				select {
				case <-ctx.Done():
					return "", context.Cause(ctx)
				case <-t.C:
				}
				worker.ReportProgress(ctx, float64(i), float64(in.Seconds), "")
			}
			return "slept", nil
		})
		if err := w.Serve(worker.Namespace{Name: sleepNamespace, Tools: []worker.Tool{sleep}, Slots: *sleepSlots, MaxConcurrency: *sleepConcurrency}); err != nil {
			return err
		}
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	stop, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return w.Stop(stop)
}

// exitWithParent ends this process, after cleanup, as soon as the process
// that started it has exited, however it exited: startProcess holds this
// process's standard input open, and the pipe ends with it. Nobody
// measures any more then, so nothing is drained: a bench killed mid-run
// leaves no server, worker or store behind. (A role started by hand with
// its standard input at its end, as from /dev/null, exits at once.)
func exitWithParent(cleanup func()) {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		if cleanup != nil {
			cleanup()
		}
		os.Exit(1)
	}()
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// process is a role this binary runs in a child process.
type process struct {
	name  string
	cmd   *exec.Cmd
	first string // the line it printed once serving
}

// startProcess starts this binary in a role and waits, up to a minute,
// for the line it prints once it serves.
func startProcess(name string, args ...string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	// Held open, never written: the child exits when it closes (see
	// exitWithParent), which is when this process exits.
	if _, err := cmd.StdinPipe(); err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd}
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		s, _ := r.ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case p.first = <-line:
		if p.first == "" {
			p.stop()
			return nil, fmt.Errorf("%s exited before it served", name)
		}
		return p, nil
	case <-time.After(time.Minute):
		p.stop()
		return nil, fmt.Errorf("%s did not serve within a minute", name)
	}
}

// stop asks the process to stop, and kills it if it has not within 20 s.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// rssKB is the process's resident set size (VmRSS), 0 where /proc has none.
func (p *process) rssKB() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// cpuTime is the CPU time (user and system) the process has used, 0
// where /proc has none.
func (p *process) cpuTime() time.Duration { return cpuTimeOf(strconv.Itoa(p.cmd.Process.Pid)) }

// cpuTimeOf reads /proc/<pid>/stat's utime and stime, which count in
// clock ticks of 1/100 s on Linux.
func cpuTimeOf(pid string) time.Duration {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command's name, in parentheses, may hold spaces: count fields after it.
	_, rest, ok := strings.Cut(string(data), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// stack is one server, coordinators and workers, each in its own process.
type stack struct {
	dir          string
	server       *process
	url, monitor string
	coordinators []*process
	workers      []*process
	names        messages.Names
	conns        []*nats.Conn
}

// stackConfig says how many processes of each kind to start.
type stackConfig struct {
	names        messages.Names
	coordinators int
	workers      int
	slots        int // of the no-op namespace, per worker
	// sleepSlots, per worker, and sleepConcurrency, across workers, of
	// the sleep namespace; none is served when sleepSlots is 0.
	sleepSlots, sleepConcurrency int
	ackWait                      time.Duration // of the workers; 0 is the worker's default
}

// startStack starts a server, then the coordinators, then the workers.
func startStack(cfg stackConfig) (_ *stack, err error) {
	dir, err := os.MkdirTemp("", "toolbus-curve-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, names: cfg.names}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if s.server, err = startProcess("the server", serverRole, "--dir", dir); err != nil {
		return nil, err
	}
	var ok bool
	if s.url, s.monitor, ok = strings.Cut(s.server.first, " "); !ok {
		return nil, fmt.Errorf("the server printed %q, not its URLs", s.server.first)
	}
	workspace, policyFile, err := writeRealisticWorkspace(dir, curveNamespace, realisticAgent)
	if err != nil {
		return nil, err
	}
	for i := range cfg.coordinators {
		p, err := startProcess(fmt.Sprintf("coordinator %d", i+1), coordinatorRole, "--server", s.url, "--prefix", cfg.names.Prefix(), "--workspace", workspace, "--policy", policyFile)
		if err != nil {
			return nil, err
		}
		s.coordinators = append(s.coordinators, p)
	}
	for i := range cfg.workers {
		p, err := startProcess(fmt.Sprintf("worker %d", i+1), workerRole, "--server", s.url, "--prefix", cfg.names.Prefix(), "--id", fmt.Sprintf("curve-%d", i+1),
			"--slots", strconv.Itoa(cfg.slots), "--sleep-slots", strconv.Itoa(cfg.sleepSlots), "--sleep-concurrency", strconv.Itoa(cfg.sleepConcurrency), "--ack-wait", cfg.ackWait.String())
		if err != nil {
			return nil, err
		}
		s.workers = append(s.workers, p)
	}
	return s, nil
}

// connect opens a connection to the stack's server, closed with the stack.
func (s *stack) connect() (*nats.Conn, error) {
	nc, err := nats.Connect(s.url)
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, nc)
	return nc, nil
}

// agent returns the realistic path's agent, whose calls go round robin
// over turns that each selected the onDemand no-op tool.
func (s *stack) agent(ctx context.Context) (*toolbusBench, error) {
	nc, err := s.connect()
	if err != nil {
		return nil, err
	}
	// The modes saturate the machine on purpose: a request queued behind
	// 64 callers' batches may wait longer than the SDK's default of 5 s, and
	// a request given up on would end a run of many minutes.
	c, err := client.New(nc, client.Options{Prefix: s.names.Prefix(), Agent: realisticAgent, RequestTimeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	tb := &toolbusBench{tool: curveNamespace + "-noop", agent: realisticAgent, turn: realisticTurn, client: c}
	if err := tb.selectInTurn(ctx); err != nil {
		return nil, err
	}
	return tb, nil
}

// cpu is the CPU time used so far by the server, the coordinators, the
// workers and this process (the callers).
func (s *stack) cpu() (server, coordinators, workers, callers time.Duration) {
	for _, p := range s.coordinators {
		coordinators += p.cpuTime()
	}
	for _, p := range s.workers {
		workers += p.cpuTime()
	}
	return s.server.cpuTime(), coordinators, workers, cpuTimeOf("self")
}

// varz is what the modes read of the server's /varz.
type varz struct {
	InMsgs  int64 `json:"in_msgs"`
	OutMsgs int64 `json:"out_msgs"`
	Mem     int64 `json:"mem"`
}

func (s *stack) varz(ctx context.Context) (varz, error) {
	var v varz
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.monitor+"/varz", nil)
	if err != nil {
		return v, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// stop kills the workers and the coordinators (a measurement is over:
// nothing they hold matters, and draining thousands of calls would take
// longer than the run), stops the server, and removes the store.
func (s *stack) stop() {
	for _, nc := range s.conns {
		nc.Close()
	}
	for _, p := range append(s.workers, s.coordinators...) {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
	if s.server != nil {
		s.server.stop()
	}
	os.RemoveAll(s.dir)
}
