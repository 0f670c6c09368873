// Command batch-openai-chat plays one iteration of an agent's loop with
// OpenAI's Chat Completions API, the model faked by a recorded response:
// it runs the response's tool calls on a running Toolbus with
// client.RunToolCalls and prints the messages to send the model next,
// the assistant message followed by one role "tool" message per call.
//
//	go run ./cmd/toolbus dev --port 0     # note its NATS URL
//	TOOLBUS_URL=nats://127.0.0.1:PORT go run ./examples/batch-openai-chat
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
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

// recorded is the Chat Completions response next to this file, with three
// parallel tool calls of the demo tools, the last with arguments cut short.
//
//go:embed response.json
var recorded []byte

func main() {
	server := flag.String("server", serverURL(), "NATS URL of a running Toolbus (toolbus dev); defaults to $TOOLBUS_URL")
	response := flag.String("response", "", "file of a recorded Chat Completions response (default: the one next to this example)")
	agent := flag.String("agent", "dev", "agent the calls are made as")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *server, *agent, *response, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batch-openai-chat:", err)
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
	var completion struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(response, &completion); err != nil {
		return fmt.Errorf("the recorded response: %w", err)
	}
	if len(completion.Choices) == 0 {
		return errors.New("the recorded response has no choices")
	}
	assistant := completion.Choices[0].Message

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
	// The assistant message holds the tool calls; RunToolCalls takes it
	// (or its tool_calls, or the whole response) as it is.
	res, err := c.RunToolCalls(ctx, "openai-chat", assistant)
	if err != nil {
		return err
	}
	next := append([]messages.JSON{messages.JSON(assistant)}, res.Messages...)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(next)
}
