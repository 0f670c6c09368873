package mcpfront_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// BenchmarkCallThroughTheFront measures one tools/call of a demo tool
// through the MCP front over streamable HTTP against the same call made
// with pkg/client, on the same stack, one call at a time. The two
// alternate, one of each per iteration, so that a machine whose load
// changes during the run slows both alike; the metrics are the median
// latency of each and their ratio.
//
//	go test -run x -bench CallThroughTheFront -count 5 ./internal/service/mcpfront
func BenchmarkCallThroughTheFront(b *testing.B) {
	s := startStack(b)
	_, url := s.front(b)
	ctx := testenv.Context(b)
	mcpCall := mcpCaller(b, url)
	sdkCall := sdkCaller(b, s.url)
	var front, sdk []time.Duration
	for b.Loop() {
		front = append(front, timed(b, ctx, mcpCall))
		sdk = append(sdk, timed(b, ctx, sdkCall))
	}
	pf, ps := median(front), median(sdk)
	b.ReportMetric(float64(pf.Microseconds()), "front-p50-µs")
	b.ReportMetric(float64(ps.Microseconds()), "sdk-p50-µs")
	b.ReportMetric(float64(pf)/float64(ps), "p50-ratio")
}

// BenchmarkThroughputOf64Sessions measures calls per second with 64
// callers at once: 64 MCP sessions on one front, each in its own turn and
// with its own HTTP client (see mcpCaller), against 64 goroutines sharing
// one pkg/client, as the front shares its own, each calling in a turn of
// its own. Each iteration is 64 calls of each; the metrics are both rates
// and their ratio.
//
//	go test -run x -bench ThroughputOf64Sessions -count 5 ./internal/service/mcpfront
func BenchmarkThroughputOf64Sessions(b *testing.B) {
	const callers = 64
	s := startStack(b)
	_, url := s.front(b)
	ctx := testenv.Context(b)
	sessions := make([]func(context.Context) error, callers)
	for i := range sessions {
		sessions[i] = mcpCaller(b, url)
	}
	sdkClient := testenv.Client(b, s.url, client.Options{Agent: "analyst"})
	direct := make([]func(context.Context) error, callers)
	for i := range direct {
		direct[i] = sdkCallerIn(b, sdkClient, fmt.Sprintf("bench-sdk-%d", i))
	}
	// One call of each caller before the clock runs: each MCP session's
	// first call finds the tool with tools.list (the sessions never list),
	// and each caller's first call opens its turn.
	concurrently(b, ctx, sessions)
	concurrently(b, ctx, direct)
	var front, sdk time.Duration
	calls := 0
	for b.Loop() {
		front += concurrently(b, ctx, sessions)
		sdk += concurrently(b, ctx, direct)
		calls += callers
	}
	frontRate, sdkRate := float64(calls)/front.Seconds(), float64(calls)/sdk.Seconds()
	b.ReportMetric(frontRate, "front-calls/s")
	b.ReportMetric(sdkRate, "sdk-calls/s")
	b.ReportMetric(frontRate/sdkRate, "throughput-ratio")
}

// mcpCaller is an MCP client of its own: a session with its own HTTP
// client, whose connection pool is the one a client process has by
// default (Go's default transport's settings), as each of 64 MCP clients
// would have. Sessions sharing one process's default transport would keep
// two idle connections between them, and 62 of 64 sessions would dial a
// new connection for every call: that measures the benchmark's process,
// not the front.
func mcpCaller(b *testing.B, url string) func(context.Context) error {
	own := http.DefaultTransport.(*http.Transport).Clone()
	b.Cleanup(own.CloseIdleConnections)
	c, _ := connectWith(b, url, []transport.StreamableHTTPCOption{
		transport.WithHTTPHeaders(bearer()),
		transport.WithHTTPBasicClient(&http.Client{Transport: own}),
	}, legacySessions())
	return func(ctx context.Context) error { return checkMCP(b, c, ctx) }
}

func checkMCP(b *testing.B, c *mcpclient.Client, ctx context.Context) error {
	res, err := callTool(ctx, c, "demo-echo", map[string]any{"text": "x"}, nil)
	if err == nil && res.IsError {
		b.Errorf("call: %+v", res)
	}
	return err
}

func sdkCaller(b *testing.B, url string) func(context.Context) error {
	return sdkCallerIn(b, testenv.Client(b, url, client.Options{Agent: "analyst"}), "bench-sdk")
}

func sdkCallerIn(b *testing.B, c *client.Client, turn string) func(context.Context) error {
	args := messages.JSON(`{"text":"x"}`)
	return func(ctx context.Context) error {
		res, err := c.Call(ctx, "demo-echo", args, client.WithTurn(turn))
		if err == nil && res.IsError {
			b.Errorf("call: %+v", res)
		}
		return err
	}
}

func timed(b *testing.B, ctx context.Context, call func(context.Context) error) time.Duration {
	start := time.Now()
	if err := call(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// concurrently makes one call with each caller at once and returns how
// long they took together.
func concurrently(b *testing.B, ctx context.Context, callers []func(context.Context) error) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for _, call := range callers {
		wg.Go(func() {
			if err := call(ctx); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
