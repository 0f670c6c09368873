package coordinator_test

import (
	"context"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/service/coordinator"
	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// BenchmarkSubmit measures the coordinator's submit, validation through
// queueing, called in process (no request hop).
func BenchmarkSubmit(b *testing.B) {
	srv := testenv.Server(b)
	c := testenv.Coordinator(b, srv.URL())
	noop := worker.Func("noop", "Does nothing.", func(ctx context.Context, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	w := testenv.Worker(b, srv.URL(), worker.Config{}, worker.Namespace{Name: "b", Tools: []worker.Tool{noop}})
	_ = w.Stop(context.Background()) // calls stay queued: only the submit is measured
	ctx := context.Background()
	req := &messages.SubmitRequest{Tool: "b-noop", Arguments: messages.JSON(`{"text":"x"}`), Agent: "bench"}
	b.ReportAllocs()
	cpu := coordinator.ProcessCPU()
	for b.Loop() {
		if _, err := c.Submit(ctx, req, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((coordinator.ProcessCPU()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
