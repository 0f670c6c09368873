package transport_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/transport"
)

// The benchmarks set this package's exchanges beside nats.go's jetstream
// package doing the same job, on one embedded server: the package keeps
// its own only where it is cheaper.

func benchStream(b *testing.B) (*nats.Conn, jetstream.JetStream, *transport.Inbox) {
	b.Helper()
	srv := testenv.Server(b)
	nc := testenv.Connect(b, srv.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.CreateStream(testenv.Context(b), jetstream.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"}, AllowDirect: true}); err != nil {
		b.Fatal(err)
	}
	inbox := transport.NewInbox(nc)
	b.Cleanup(inbox.Close)
	return nc, js, inbox
}

func BenchmarkPublishWait(b *testing.B) {
	nc, js, inbox := benchStream(b)
	ctx := testenv.Context(b)
	data := make([]byte, 256)
	b.Run("transport", func(b *testing.B) {
		p := transport.NewPublisher(nc, inbox)
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := p.PublishWait(ctx, &nats.Msg{Subject: "bench.publish", Data: data}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jetstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "bench.publish", Data: data}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGetLast(b *testing.B) {
	nc, js, inbox := benchStream(b)
	ctx := testenv.Context(b)
	if _, err := js.Publish(ctx, "bench.last", make([]byte, 256)); err != nil {
		b.Fatal(err)
	}
	b.Run("transport", func(b *testing.B) {
		s := transport.NewStream(nc, inbox, "BENCH")
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := s.GetLast(ctx, "bench.last"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jetstream", func(b *testing.B) {
		// A stream handle costs an info request, made once here.
		stream, err := js.Stream(ctx, "BENCH")
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := stream.GetLastMsgForSubject(ctx, "bench.last"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Publishes that do not wait, the acknowledgements read as they come.
func BenchmarkPublishThen(b *testing.B) {
	nc, js, inbox := benchStream(b)
	ctx := testenv.Context(b)
	data := make([]byte, 256)
	b.Run("transport", func(b *testing.B) {
		p := transport.NewPublisher(nc, inbox)
		acks := make(chan error, 1024)
		b.ReportAllocs()
		sent := 0
		for b.Loop() {
			if err := p.PublishThen(&nats.Msg{Subject: "bench.then", Data: data}, time.Minute, func(_ uint64, _ bool, err error) { acks <- err }); err != nil {
				b.Fatal(err)
			}
			sent++
			for sent > cap(acks)/2 {
				if err := <-acks; err != nil {
					b.Fatal(err)
				}
				sent--
			}
		}
		for ; sent > 0; sent-- {
			if err := <-acks; err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jetstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: "bench.then", Data: data}); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal("acknowledgements did not come")
		}
	})
}
