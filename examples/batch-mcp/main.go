// Command batch-mcp answers a host's MCP tools/call requests, recorded in
// a file, in one batch: it runs them on a running Toolbus with
// client.RunToolCalls and prints the JSON-RPC responses, each carrying
// the CallToolResult of its request.
//
//	go run ./cmd/toolbus dev --port 0     # note its NATS URL
//	TOOLBUS_URL=nats://127.0.0.1:PORT go run ./examples/batch-mcp
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

// recorded are the tools/call requests next to this file: three calls of
// the demo tools, the last with arguments that do not match the tool's
// input schema.
//
//go:embed requests.json
var recorded []byte

func main() {
	server := flag.String("server", serverURL(), "NATS URL of a running Toolbus (toolbus dev); defaults to $TOOLBUS_URL")
	requests := flag.String("requests", "", "file of recorded tools/call requests, a JSON array (default: the one next to this example)")
	agent := flag.String("agent", "dev", "agent the calls are made as")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *server, *agent, *requests, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "batch-mcp:", err)
		os.Exit(1)
	}
}

func serverURL() string {
	if url := os.Getenv("TOOLBUS_URL"); url != "" {
		return url
	}
	return nats.DefaultURL
}

// response is a JSON-RPC response to a tools/call request.
type response struct {
	JSONRPC string        `json:"jsonrpc"`
	ID      messages.JSON `json:"id"`
	Result  messages.JSON `json:"result"`
}

func run(ctx context.Context, server, agent, requestsFile string, out io.Writer) error {
	raw := recorded
	if requestsFile != "" {
		var err error
		if raw, err = os.ReadFile(requestsFile); err != nil {
			return err
		}
	}
	var requests []struct {
		ID     messages.JSON `json:"id"`
		Method string        `json:"method"`
	}
	if err := json.Unmarshal(raw, &requests); err != nil {
		return fmt.Errorf("the recorded requests: %w", err)
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
	res, err := c.RunToolCalls(ctx, "mcp", json.RawMessage(raw))
	if err != nil {
		return err
	}
	// One CallToolResult per tools/call request, in their order; requests
	// of other methods were passed over.
	var next []response
	for _, req := range requests {
		if req.Method != "tools/call" {
			continue
		}
		if len(next) == len(res.Messages) {
			return fmt.Errorf("%d results for more tools/call requests", len(res.Messages))
		}
		next = append(next, response{JSONRPC: "2.0", ID: req.ID, Result: res.Messages[len(next)]})
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(next)
}
