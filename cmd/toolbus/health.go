package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/telemetry"
)

// runHealth asks a health endpoint (a process's /healthz or /readyz) and
// says whether it answered 200: the health check of a container whose
// image has no shell and no HTTP client but this program.
func runHealth(ctx context.Context, _ globals, args []string) error {
	fs := newFlags("health")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) != 1 {
		return usageError("toolbus health takes one URL, such as http://127.0.0.1:9464/readyz")
	}
	u, err := url.Parse(pos[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError(fmt.Sprintf("toolbus health: %q is not an http:// or https:// URL", pos[0]))
	}
	if *timeout <= 0 {
		return usageError("toolbus health: --timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return usageError(fmt.Sprintf("toolbus health: %v", err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "toolbus health: %s: %v\n", u, err)
		return exitError(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "toolbus health: %s: %s: %s\n", u, resp.Status, text)
		return exitError(1)
	}
	fmt.Printf("%s: %s\n", u, text)
	return nil
}

// serveProbes opens the --metrics-listen listener of a front (the console,
// the MCP front): /metrics, /healthz, and /readyz, which is ready while
// the NATS connection is up. It returns the listener's shutdown.
func serveProbes(ctx context.Context, service, listen string, nc *nats.Conn, log *slog.Logger) (func(), error) {
	if listen == "" {
		return func() {}, nil
	}
	tel, err := telemetry.Start(ctx, telemetry.Config{Service: service, Listen: listen, Logger: log})
	if err != nil {
		return nil, err
	}
	tel.SetReady(telemetry.NATSReady{Conn: nc}.Check)
	return func() { tel.Close() }, nil
}
