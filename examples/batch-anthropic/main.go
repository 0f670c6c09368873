// Command batch-anthropic plays one iteration of an agent's loop with
// Anthropic's Messages API, the model faked by a recorded response: it
// runs the message's tool_use blocks on a running Toolbus with
// client.RunToolCalls and prints the messages to send the model next, the
// assistant message followed by one user message of tool_result blocks.
//
//	go run ./cmd/toolbus dev --port 0     # note its NATS URL
//	TOOLBUS_URL=nats://127.0.0.1:PORT go run ./examples/batch-anthropic
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

// recorded is the Messages API response next to this file: a text block
// and three parallel tool_use blocks of the demo tools, the last with
// input that does not match the tool's input schema.
//
//go:embed response.json
var recorded []byte

func main() {
	server := flag.String("server", serverURL(), "NATS URL of a running Toolbus (toolbus dev); defaults to $TOOLBUS_URL")
	response := flag.String("response", "", "file of a recorded Messages API response (default: the one next to this example)")
	agent := flag.String("agent", "dev", "agent the calls are made as")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *server, *agent, *response, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batch-anthropic:", err)
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
	var msg struct {
		Role    string        `json:"role"`
		Content messages.JSON `json:"content"`
	}
	if err := json.Unmarshal(response, &msg); err != nil {
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
	// RunToolCalls takes the content blocks (or the whole message) and
	// passes over the blocks that are not tool_use.
	res, err := c.RunToolCalls(ctx, "anthropic", msg.Content)
	if err != nil {
		return err
	}
	// The assistant turn is sent back as the API returned it, role and
	// content only.
	assistant, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	next := append([]messages.JSON{assistant}, res.Messages...)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(next)
}
