// Command toolbus-bench is the developers' measuring tool, apart from the
// user's toolbus command. Each mode starts what it measures in its own
// process (an embedded NATS server with JetStream in a temporary
// directory) and prints one JSON line last.
//
//	toolbus-bench [flags]                   the call path against a plain JetStream baseline
//	toolbus-bench --soak [flags]            kill worker processes while calls run
//	toolbus-bench search-eval --corpus DIR  discovery quality on a tool-retrieval corpus
//	toolbus-bench scale [flags]             throughput against worker and coordinator processes
//	toolbus-bench inflight [flags]          many long-running calls in flight at once
//	toolbus-bench history [flags]           reads of a call, a turn and a resume among many stored calls
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `toolbus-bench — measure Toolbus

Usage:
  toolbus-bench [flags]                   measure the call path against a plain JetStream baseline
  toolbus-bench --soak [flags]            kill and restart worker processes while calls run;
                                          count lost and duplicated results
  toolbus-bench search-eval --corpus DIR  measure discovery on a tool-retrieval corpus
                                          (tools.jsonl and queries.jsonl)
  toolbus-bench scale [flags]             throughput against the number of worker and
                                          coordinator processes, on one server process
  toolbus-bench inflight [flags]          many long-running calls in flight at once: memory,
                                          the server's messages, a short call's latency
  toolbus-bench history [flags]           calls.get, turns.get and a turn's resume among
                                          many stored calls
  toolbus-bench calls-list [--calls N]    measure calls.list pages with N finished calls stored

Each prints a JSON line last; "toolbus-bench MODE --help" lists a mode's flags.

Flags of the bench and the soak:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		var ex exitError
		if errors.As(err, &ex) {
			os.Exit(int(ex))
		}
		fmt.Fprintln(os.Stderr, "toolbus-bench:", err)
		os.Exit(1)
	}
}

// exitError ends the program with a status and no further message.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(ctx context.Context, args []string) error {
	if len(args) > 0 {
		switch args[0] {
		case "search-eval":
			return runSearchEval(args[1:])
		case "calls-list":
			return runCallsList(ctx, args[1:])
		case soakWorkerCommand:
			return runSoakWorker(ctx, args[1:])
		case "scale":
			return runScale(ctx, args[1:])
		case "inflight":
			return runInflight(ctx, args[1:])
		case "history":
			return runHistory(ctx, args[1:])
		case serverRole:
			return runServerRole(ctx, args[1:])
		case coordinatorRole:
			return runCoordinatorRole(ctx, args[1:])
		case workerRole:
			return runWorkerRole(ctx, args[1:])
		}
	}
	return runBench(ctx, args)
}

// parse parses a mode's flags, which take no positional arguments.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError(0)
		}
		return exitError(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return exitError(2)
	}
	return nil
}
