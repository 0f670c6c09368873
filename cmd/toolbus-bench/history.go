package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/pkg/messages"
)

// historyReport is the last line of the history mode: reads among many
// stored calls, p50 and p99 in µs.
type historyReport struct {
	Calls     int     `json:"calls"`
	Turns     int     `json:"turns"`
	TurnCalls int     `json:"turn_calls"`
	StoreS    float64 `json:"store_s"`
	// StoredPerS is the rate the calls were stored and finished at.
	StoredPerS float64 `json:"stored_per_s"`
	// ServerRSSMB is the server process's resident set once every call
	// is stored, ServerRSSAfterReadsMB once the reads are measured, and
	// StoreMB the size of its store on disk.
	ServerRSSMB           float64 `json:"server_rss_mb"`
	ServerRSSAfterReadsMB float64 `json:"server_rss_after_reads_mb"`
	StoreMB               float64 `json:"store_mb"`
	Samples               int     `json:"samples"`

	CallsGetP50US float64 `json:"calls_get_p50_us"`
	CallsGetP99US float64 `json:"calls_get_p99_us"`
	// Old turns are the first tenth stored, young ones the last tenth.
	TurnsGetOldP50US   float64 `json:"turns_get_old_p50_us"`
	TurnsGetOldP99US   float64 `json:"turns_get_old_p99_us"`
	TurnsGetYoungP50US float64 `json:"turns_get_young_p50_us"`
	TurnsGetYoungP99US float64 `json:"turns_get_young_p99_us"`
	// Any turn: drawn from all of them.
	TurnsGetP50US float64 `json:"turns_get_p50_us"`
	TurnsGetP99US float64 `json:"turns_get_p99_us"`
	// tools.list of a random turn, in Anthropic's format: the turn's
	// saved selections (the tool it activated) count.
	ToolsListP50US float64 `json:"tools_list_p50_us"`
	ToolsListP99US float64 `json:"tools_list_p99_us"`
	// A resume is what an agent resuming a turn asks: tools.list with the
	// turn, then turns.get.
	ResumeP50US float64 `json:"resume_p50_us"`
	ResumeP99US float64 `json:"resume_p99_us"`
	// A page of 50 of calls.list, newest first; CallsListError says why
	// it was not measured.
	CallsListP50US float64 `json:"calls_list_p50_us,omitempty"`
	CallsListP99US float64 `json:"calls_list_p99_us,omitempty"`
	CallsListError string  `json:"calls_list_error,omitempty"`
}

// runHistory stores many finished calls through the real path, in turns,
// then measures the reads an agent or an operator makes of them.
func runHistory(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolbus-bench history", flag.ContinueOnError)
	calls := fs.Int("calls", 1_000_000, "finished calls to store")
	turnCalls := fs.Int("turn-calls", 20, "calls per turn, submitted as one batch (at most 64, a batch's bound)")
	callers := fs.Int("callers", 64, "concurrent agents storing the calls")
	samples := fs.Int("samples", 1000, "reads measured of each kind")
	workers := fs.Int("workers", 1, "worker processes")
	coordinators := fs.Int("coordinators", 1, "coordinator processes")
	prefix := fs.String("prefix", messages.DefaultPrefix, "subject prefix and resource-name stem of the Toolbus measured")
	if err := parse(fs, args); err != nil {
		return err
	}
	names, err := messages.NewNames(*prefix)
	if err != nil {
		return err
	}
	if *calls < 1 || *turnCalls < 1 || *turnCalls > messages.MaxBatchCalls || *samples < 1 || *callers < 1 || *workers < 1 || *coordinators < 1 {
		return exitErrorf("history: --calls, --turn-calls (at most %d), --samples, --callers, --workers and --coordinators must be positive", messages.MaxBatchCalls)
	}
	turns := (*calls + *turnCalls - 1) / *turnCalls
	r := historyReport{Calls: turns * *turnCalls, Turns: turns, TurnCalls: *turnCalls, Samples: *samples}
	s, err := startStack(stackConfig{names: names, coordinators: *coordinators, workers: *workers, slots: 64})
	if err != nil {
		return err
	}
	defer s.stop()
	tb, err := s.agent(ctx)
	if err != nil {
		return err
	}
	c := tb.client

	// Store: each turn selects the onDemand tool, then runs one model
	// iteration of turnCalls calls of it as a batch, and waits for them.
	ids := make([]string, r.Calls)
	turnName := func(i int) string { return fmt.Sprintf("history-%d", i) }
	var next atomic.Int64
	begin := time.Now()
	if _, err := concurrentLatencies(ctx, turns, *callers, func(ctx context.Context) error {
		i := int(next.Add(1) - 1) // turns are numbered in the order they start
		turn := turnName(i)
		if _, err := c.Activate(ctx, turn, tb.tool); err != nil {
			return fmt.Errorf("turn %s: activate: %w", turn, err)
		}
		batch, err := c.SubmitBatch(ctx, messages.SubmitBatchRequest{Format: "anthropic", ToolCalls: noopToolUses(i, *turnCalls, tb.tool), Turn: turn})
		if err != nil {
			return fmt.Errorf("turn %s: submit: %w", turn, err)
		}
		res, err := c.AwaitResults(ctx, "anthropic", batch.Calls)
		if err != nil {
			return fmt.Errorf("turn %s: results: %w", turn, err)
		}
		if len(res.Calls) != *turnCalls {
			return fmt.Errorf("turn %s: %d results for %d calls", turn, len(res.Calls), *turnCalls)
		}
		for j, bc := range res.Calls {
			if bc.Error != nil || bc.State != messages.StateCompleted {
				return fmt.Errorf("turn %s: call %d: %s %v", turn, j, bc.State, bc.Error)
			}
			ids[i**turnCalls+j] = bc.CallID
		}
		if n := i + 1; n%max(turns/10, 1) == 0 {
			fmt.Fprintf(os.Stderr, "%d calls stored in %.0fs\n", n**turnCalls, time.Since(begin).Seconds())
		}
		return nil
	}); err != nil {
		return err
	}
	r.StoreS = time.Since(begin).Seconds()
	r.StoredPerS = float64(r.Calls) / r.StoreS
	r.ServerRSSMB = float64(s.server.rssKB()) / 1024
	r.StoreMB = float64(diskUsage(s.dir)) / (1 << 20)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	tenth := max(turns/10, 1)
	measure := func(what string, read func(ctx context.Context) error) (p50, p99 float64, err error) {
		lat, err := sequential(ctx, *samples, read)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", what, err)
		}
		p50, p99 = percentileUS(lat, 50), percentileUS(lat, 99)
		fmt.Fprintf(os.Stderr, "%s: p50 %.0fµs p99 %.0fµs\n", what, p50, p99)
		return p50, p99, nil
	}
	if r.CallsGetP50US, r.CallsGetP99US, err = measure("calls.get", func(ctx context.Context) error {
		id := ids[rng.IntN(len(ids))]
		info, err := c.Get(ctx, id)
		if err == nil && info.State != messages.StateCompleted {
			err = fmt.Errorf("call %s is %s, not completed", id, info.State)
		}
		return err
	}); err != nil {
		return err
	}
	readTurn := func(ctx context.Context, turn string) error {
		info, err := c.Turn(ctx, turn)
		if err == nil && len(info.Calls) != *turnCalls {
			err = fmt.Errorf("turn %s has %d calls, not %d", turn, len(info.Calls), *turnCalls)
		}
		return err
	}
	if r.TurnsGetOldP50US, r.TurnsGetOldP99US, err = measure("turns.get (oldest tenth)", func(ctx context.Context) error {
		return readTurn(ctx, turnName(rng.IntN(tenth)))
	}); err != nil {
		return err
	}
	if r.TurnsGetYoungP50US, r.TurnsGetYoungP99US, err = measure("turns.get (youngest tenth)", func(ctx context.Context) error {
		return readTurn(ctx, turnName(turns-1-rng.IntN(tenth)))
	}); err != nil {
		return err
	}
	if r.TurnsGetP50US, r.TurnsGetP99US, err = measure("turns.get (any turn)", func(ctx context.Context) error {
		return readTurn(ctx, turnName(rng.IntN(turns)))
	}); err != nil {
		return err
	}
	listTools := func(ctx context.Context, turn string) error {
		tools, err := c.ListTools(ctx, messages.ListToolsRequest{Turn: turn, Format: "anthropic"})
		if err == nil && !listsTool(tools, tb.tool) {
			err = fmt.Errorf("tools.list of turn %s does not list %s, which the turn selected", turn, tb.tool)
		}
		return err
	}
	if r.ToolsListP50US, r.ToolsListP99US, err = measure("tools.list (a turn's selections)", func(ctx context.Context) error {
		return listTools(ctx, turnName(rng.IntN(turns)))
	}); err != nil {
		return err
	}
	if r.ResumeP50US, r.ResumeP99US, err = measure("resume", func(ctx context.Context) error {
		turn := turnName(rng.IntN(turns))
		if err := listTools(ctx, turn); err != nil {
			return err
		}
		return readTurn(ctx, turn)
	}); err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = c.ListCalls(lctx, messages.CallsListRequest{Limit: 50})
	cancel()
	if err != nil {
		r.CallsListError = err.Error()
		fmt.Fprintf(os.Stderr, "calls.list not measured: %v\n", err)
	} else if r.CallsListP50US, r.CallsListP99US, err = measure("calls.list", func(ctx context.Context) error {
		page, err := c.ListCalls(ctx, messages.CallsListRequest{Limit: 50})
		if err == nil && len(page.Calls) != min(50, r.Calls) {
			err = fmt.Errorf("a page of %d calls, not 50", len(page.Calls))
		}
		return err
	}); err != nil {
		return err
	}

	fmt.Fprintf(os.Stderr, "\n%d calls in %d turns of %d stored in %.0fs (%.0f calls/s); %d reads of each kind, one at a time\n",
		r.Calls, r.Turns, r.TurnCalls, r.StoreS, r.StoredPerS, r.Samples)
	r.ServerRSSAfterReadsMB = float64(s.server.rssKB()) / 1024
	fmt.Fprintf(os.Stderr, "the server's resident set %.0f MB once the calls were stored, %.0f MB after the reads; its store %.0f MB\n", r.ServerRSSMB, r.ServerRSSAfterReadsMB, r.StoreMB)
	fmt.Fprintf(os.Stderr, "%-32s %9s %9s\n", "read", "p50 µs", "p99 µs")
	row := func(name string, p50, p99 float64) { fmt.Fprintf(os.Stderr, "%-32s %9.0f %9.0f\n", name, p50, p99) }
	row("calls.get (random call)", r.CallsGetP50US, r.CallsGetP99US)
	row("turns.get (oldest tenth)", r.TurnsGetOldP50US, r.TurnsGetOldP99US)
	row("turns.get (youngest tenth)", r.TurnsGetYoungP50US, r.TurnsGetYoungP99US)
	row("turns.get (any turn)", r.TurnsGetP50US, r.TurnsGetP99US)
	row("tools.list (a turn's selections)", r.ToolsListP50US, r.ToolsListP99US)
	row("resume (tools.list + turns.get)", r.ResumeP50US, r.ResumeP99US)
	if r.CallsListError == "" {
		row("calls.list (page of 50)", r.CallsListP50US, r.CallsListP99US)
	} else {
		fmt.Fprintf(os.Stderr, "%-32s not measured: %s\n", "calls.list (page of 50)", r.CallsListError)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return nil
}

// diskUsage is the size of the files under dir, in bytes.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// noopToolUses is the content of a model message calling tool n times,
// in Anthropic's shape, with tool-call IDs unique to the turn.
func noopToolUses(turn, n int, tool string) messages.JSON {
	blocks := make([]string, n)
	for j := range blocks {
		blocks[j] = fmt.Sprintf(`{"type":"tool_use","id":"toolu_%d_%d","name":%q,"input":{"text":"x"}}`, turn, j, tool)
	}
	return messages.JSON("[" + strings.Join(blocks, ",") + "]")
}

// listsTool tells whether a tools.list reply names the tool.
func listsTool(reply *messages.ListToolsReply, tool string) bool {
	for _, t := range reply.Tools {
		if t.Name == tool {
			return true
		}
	}
	return false
}
