package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// BenchmarkCall measures one call at a time, from Call to its result, in
// one process: the coordinator's submit under a policy that allows the
// call (its queued event carrying the decision), a worker's delivery and
// run of a no-op tool, and the client's wait for the result. Its
// allocations are the whole process's: server, coordinator, worker and
// client.
func BenchmarkCall(b *testing.B) {
	srv := testenv.Server(b)
	policyFile := filepath.Join(b.TempDir(), "policy.yaml")
	policy := "default: allow\nrules:\n  - {id: guard, tool: \"b:noop\", arguments: [{pointer: /text, equals: forbidden}], effect: deny}\n"
	if err := os.WriteFile(policyFile, []byte(policy), 0o600); err != nil {
		b.Fatal(err)
	}
	testenv.Coordinator(b, srv.URL(), func(cfg *coordinator.Config) { cfg.PolicyFile = policyFile })
	noop := worker.Func("noop", "Does nothing.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	testenv.Worker(b, srv.URL(), worker.Config{}, worker.Namespace{Name: "b", Tools: []worker.Tool{noop}})
	c, err := client.New(testenv.Connect(b, srv.URL()), client.Options{Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	ctx := context.Background()
	args := messages.JSON(`{"text":"x"}`)
	call := func() {
		res, err := c.Call(ctx, "b-noop", args, client.WithTurn("bench-turn"))
		if err != nil || res.IsError {
			b.Fatalf("call: %+v, %v", res, err)
		}
	}
	call() // the worker's tool in the coordinator's catalog
	b.ReportAllocs()
	cpu := processCPU(b)
	for b.Loop() {
		call()
	}
	b.ReportMetric(float64((processCPU(b)-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
