package client_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/internal/wire/natsserver"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/toolformat"
	"github.com/toolbus/toolbus/pkg/toolschema"
	"github.com/toolbus/toolbus/pkg/worker"
)

// A Go agent that runs its model's tool calls itself: it reads the calls
// of the model's response with toolformat.Read, runs each with Call (in
// the order it likes, with the options it likes), and renders their
// outcomes as the provider's next input with toolformat.Render, the same
// bytes as RunToolCalls would have. A call the reader refused (here, the
// third: its arguments are not JSON) and one the coordinator refused (no
// tool weather-tides) are answered to the model as refusals.
func ExampleClient_Call_renderResults() {
	c, stop, err := exampleStack()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The model's response, as OpenAI's Chat Completions API returned it.
	response, err := os.ReadFile("testdata/openai-chat-response.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	calls, _, err := toolformat.Read(toolschema.OpenAIChat, response)
	if err != nil {
		fmt.Println(err)
		return
	}
	outcomes := make([]toolformat.Outcome, len(calls))
	for i, call := range calls {
		if call.Refused != nil {
			outcomes[i] = call.Outcome(nil, nil)
			continue
		}
		res, err := c.Call(ctx, call.Name, call.Arguments, client.WithTurn("turn-weather"))
		outcomes[i] = call.Outcome(res, err)
	}
	next, err := toolformat.Render(toolschema.OpenAIChat, outcomes)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range next {
		fmt.Println(string(m))
	}
	// Output:
	// {"role":"tool","tool_call_id":"call_Hq3mT8vWc1Zb5XkR9pLn2Ye4","content":"Oslo: sunny for 2 days"}
	// {"role":"tool","tool_call_id":"call_Vd7sK2qNf6Jx1GmP4tRw8Bc0","content":"The call was refused (tool_not_found): no tool weather-tides in the catalog"}
	// {"role":"tool","tool_call_id":"call_Lr5yE9uAo3Ti8WnD2kHs6Qz1","content":"The call was refused (invalid_arguments): arguments of weather-forecast are not JSON: \"{\\\"city\\\": \\\"Tromsø\\\"\""}
}

type forecastArgs struct {
	City string `json:"city"`
	Days int    `json:"days"`
}

// exampleStack starts what the example talks to, as a deployment has it:
// a NATS server with JetStream, a coordinator, a worker serving
// weather-forecast, and a client. stop stops them all.
func exampleStack() (c *client.Client, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	dir, err := os.MkdirTemp("", "toolbus-example-")
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = os.RemoveAll(dir) })
	srv, err := natsserver.Start(natsserver.Config{DataDir: dir})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, srv.Stop)
	connect := func() (*nats.Conn, error) {
		nc, err := nats.Connect(srv.URL())
		if err == nil {
			stops = append(stops, nc.Close)
		}
		return nc, err
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nc, err := connect()
	if err != nil {
		return nil, nil, err
	}
	coord, err := coordinator.New(coordinator.Config{Conn: nc, Logger: quiet})
	if err == nil {
		err = coord.Start(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = coord.Stop(ctx) })
	if nc, err = connect(); err != nil {
		return nil, nil, err
	}
	w, err := worker.New(worker.Config{Conn: nc, Logger: quiet})
	if err != nil {
		return nil, nil, err
	}
	forecast := worker.Func("forecast", "Forecast for a city.", func(ctx context.Context, in forecastArgs) (string, error) {
		return fmt.Sprintf("%s: sunny for %d days", in.City, in.Days), nil
	})
	if err = w.Serve(worker.Namespace{Name: "weather", Tools: []worker.Tool{forecast}}); err == nil {
		err = w.Start(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(wctx)
	})
	if nc, err = connect(); err != nil {
		return nil, nil, err
	}
	if c, err = client.New(nc, client.Options{}); err != nil {
		return nil, nil, err
	}
	stops = append(stops, c.Close)
	return c, stop, nil
}

// TestRenderedAsRunToolCalls: the calls that ExampleClient_Call_renderResults
// runs itself and renders with toolformat come out of RunToolCalls, which
// has the coordinator run and render them, as the same bytes.
func TestRenderedAsRunToolCalls(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	forecast := worker.Func("forecast", "Forecast for a city.", func(ctx context.Context, in forecastArgs) (string, error) {
		return fmt.Sprintf("%s: sunny for %d days", in.City, in.Days), nil
	})
	testenv.Worker(t, srv.URL(), worker.Config{}, worker.Namespace{Name: "weather", Tools: []worker.Tool{forecast}})
	c := testenv.Client(t, srv.URL(), client.Options{})
	response, err := os.ReadFile("testdata/openai-chat-response.json")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunToolCalls(testenv.Context(t), toolschema.OpenAIChat, response, client.WithTurn("turn-weather"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"role":"tool","tool_call_id":"call_Hq3mT8vWc1Zb5XkR9pLn2Ye4","content":"Oslo: sunny for 2 days"}`,
		`{"role":"tool","tool_call_id":"call_Vd7sK2qNf6Jx1GmP4tRw8Bc0","content":"The call was refused (tool_not_found): no tool weather-tides in the catalog"}`,
		`{"role":"tool","tool_call_id":"call_Lr5yE9uAo3Ti8WnD2kHs6Qz1","content":"The call was refused (invalid_arguments): arguments of weather-forecast are not JSON: \"{\\\"city\\\": \\\"Tromsø\\\"\""}`,
	}
	got := make([]string, len(res.Messages))
	for i, m := range res.Messages {
		got[i] = string(m)
	}
	if !slices.Equal(got, want) {
		t.Errorf("RunToolCalls renders\n%s\nthe example renders\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
