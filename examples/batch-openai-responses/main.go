// Command batch-openai-responses plays one iteration of an agent's loop
// with OpenAI's Responses API, the model faked by a recorded response: it
// runs the response's function_call items on a running Toolbus with
// client.RunToolCalls and prints the input to send the model next, the
// response's output items followed by one function_call_output item per
// call.
//
//	go run ./cmd/toolbus dev --port 0     # note its NATS URL
//	TOOLBUS_URL=nats://127.0.0.1:PORT go run ./examples/batch-openai-responses
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

// recorded is the Responses API response next to this file, with three
// parallel function calls of the demo tools, the last with arguments that
// do not match the tool's input schema.
//
//go:embed response.json
var recorded []byte

func main() {
	server := flag.String("server", serverURL(), "NATS URL of a running Toolbus (toolbus dev); defaults to $TOOLBUS_URL")
	response := flag.String("response", "", "file of a recorded Responses API response (default: the one next to this example)")
	agent := flag.String("agent", "dev", "agent the calls are made as")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *server, *agent, *response, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batch-openai-responses:", err)
		os.Exit(1)
	}
}

func serverURL() string {
	if url := os.Getenv("TOOLBUS_URL"); url != "" {
		return url
	}
	return nats.DefaultURL
}

func run(ctx context.Context, server, agent, responseFile string, out io.Writer) error {
	response := recorded
	if responseFile != "" {
		var err error
		if response, err = os.ReadFile(responseFile); err != nil {
			return err
		}
	}
	var resp struct {
		Output []messages.JSON `json:"output"`
	}
	if err := json.Unmarshal(response, &resp); err != nil {
		return fmt.Errorf("the recorded response: %w", err)
	}

	nc, err := nats.Connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := client.New(nc, client.Options{Agent: agent})
	if err != nil {
		return err
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// RunToolCalls takes the whole response (or its output items) and
	// passes over the items that are not function calls.
	res, err := c.RunToolCalls(ctx, "openai-responses", json.RawMessage(response))
	if err != nil {
		return err
	}
	next := append(resp.Output, res.Messages...)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(next)
}
