// Command batch-gemini plays one iteration of an agent's loop with the
// Gemini API, the model faked by a recorded response: it runs the
// candidate's functionCall parts on a running Toolbus with
// client.RunToolCalls and prints the contents to send the model next,
// the model's content followed by a user content of functionResponse
// parts.
//
//	go run ./cmd/toolbus dev --port 0     # note its NATS URL
//	TOOLBUS_URL=nats://127.0.0.1:PORT go run ./examples/batch-gemini
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

// recorded is the GenerateContentResponse next to this file, with three
// parallel function calls of the demo tools (without IDs, as Gemini 2.5
// writes them), the last with arguments that do not match the tool's
// input schema.
//
//go:embed response.json
var recorded []byte

func main() {
	server := flag.String("server", serverURL(), "NATS URL of a running Toolbus (toolbus dev); defaults to $TOOLBUS_URL")
	response := flag.String("response", "", "file of a recorded GenerateContentResponse (default: the one next to this example)")
	agent := flag.String("agent", "dev", "agent the calls are made as")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *server, *agent, *response, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batch-gemini:", err)
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
		Candidates []struct {
			Content messages.JSON `json:"content"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal(response, &resp); err != nil {
		return fmt.Errorf("the recorded response: %w", err)
	}
	if len(resp.Candidates) == 0 {
		return errors.New("the recorded response has no candidates")
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
	// Given the whole response, RunToolCalls reads its first candidate and
	// takes its responseId to tell this iteration's calls, which have no
	// IDs, from a later iteration's.
	res, err := c.RunToolCalls(ctx, "gemini", json.RawMessage(response))
	if err != nil {
		return err
	}
	next := append([]messages.JSON{resp.Candidates[0].Content}, res.Messages...)
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(next)
}
