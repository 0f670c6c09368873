package transport_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// GetPayloads hands the payloads of consecutive sequences in order, with
// the count and the last sequence sent, so that a gap of deleted messages
// shows; a read past the end is no payload at all, and a subject filter
// is refused.
func TestGetPayloads(t *testing.T) {
	t.Parallel()
	nc, p := streamAndPublisher(t, "pay")
	ctx := testenv.Context(t)
	for i := range 6 {
		msg := nats.NewMsg(fmt.Sprintf("pay.%d", i))
		msg.Header.Set("Toolbus-Version", "3")
		msg.Data = []byte(fmt.Sprint(i))
		if _, _, err := p.PublishWait(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	s := transport.NewStream(nc, nil, "PAY")
	read := func(req transport.BatchRequest) ([]string, transport.PayloadBatch) {
		t.Helper()
		var got []string
		end, err := s.GetPayloads(ctx, req, func(data []byte) bool {
			got = append(got, string(data))
			return true
		})
		if err != nil {
			t.Fatalf("read %+v: %v", req, err)
		}
		return got, end
	}
	got, end := read(transport.BatchRequest{Seq: 2, Batch: 3})
	if !slices.Equal(got, []string{"1", "2", "3"}) || end != (transport.PayloadBatch{Last: 4, Count: 3}) {
		t.Errorf("sequences 2 to 4: %v, %+v", got, end)
	}
	got, end = read(transport.BatchRequest{Seq: 5, Batch: 10})
	if !slices.Equal(got, []string{"4", "5"}) || end != (transport.PayloadBatch{Last: 6, Count: 2}) {
		t.Errorf("sequences 5 on: %v, %+v", got, end)
	}
	if got, end = read(transport.BatchRequest{Seq: 7, Batch: 10}); len(got) != 0 || end.Count != 0 {
		t.Errorf("past the end: %v, %+v", got, end)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, "PAY")
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, 3); err != nil {
		t.Fatal(err)
	}
	got, end = read(transport.BatchRequest{Seq: 2, Batch: 3})
	if !slices.Equal(got, []string{"1", "3", "4"}) || end != (transport.PayloadBatch{Last: 5, Count: 3}) {
		t.Errorf("sequences 2 to 4 with 3 deleted: %v, %+v", got, end)
	}
	if _, err := s.GetPayloads(ctx, transport.BatchRequest{Seq: 1, Batch: 3, NextBySubject: "pay.1"}, func([]byte) bool { return true }); err == nil {
		t.Error("a read of payloads with a subject filter was not refused")
	}
}

// BenchmarkGetBatchWindow reads a window of 2,000 consecutive messages
// of 400 bytes with a header, as calls.list's scan does: with their
// headers (GetBatch) and without (GetPayloads).
func BenchmarkGetBatchWindow(b *testing.B) {
	nc, js, inbox := benchStream(b)
	ctx := testenv.Context(b)
	const stored, window = 20_000, 2_000
	data := make([]byte, 400)
	for i := range stored {
		msg := &nats.Msg{Subject: "bench.events.0a.call" + string(rune('a'+i%26)) + ".result.ns1", Header: nats.Header{"Toolbus-Version": {"3"}}, Data: data}
		if _, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	s := transport.NewStream(nc, nil, "BENCH")
	req := transport.BatchRequest{Seq: stored / 2, Batch: window}
	b.Run("headers", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			n := 0
			if err := s.GetBatch(ctx, req, func(uint64, *nats.Msg) bool { n++; return true }); err != nil || n != window {
				b.Fatal(n, err)
			}
		}
	})
	for _, r := range []struct {
		name string
		s    *transport.Stream
	}{{"payloads", s}, {"payloads-inbox", transport.NewStream(nc, inbox, "BENCH")}} {
		b.Run(r.name, func(b *testing.B) {
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				end, err := r.s.GetPayloads(ctx, req, func([]byte) bool { return true })
				if err != nil || end.Count != window || end.Last != req.Seq+window-1 {
					b.Fatal(end, err)
				}
			}
		})
	}
}

// reportCPU reports the process's CPU time per operation when the
// function it returns is called.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N)/1e6, "cpu-ms/op") }
}
