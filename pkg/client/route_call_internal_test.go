package client

import (
	"context"
	"errors"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/messages"
)

// connectToAServer starts a NATS server of the test's own and returns a
// connection to it (the test helpers import this package, so an internal
// test starts its server itself).
func connectToAServer(t *testing.T) (connect func() *nats.Conn) {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	return func() *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
}

// TestAnEndedWaitEndsItsLoudSubmit: a call whose quiet copies went
// unreceipted sends its submit as a request, which a coordinator behind on
// its writes may leave unanswered while the call's result arrives. Once
// the call's wait ends, that request ends too, instead of copying the
// submit to the coordinators until the caller's context ends.
func TestAnEndedWaitEndsItsLoudSubmit(t *testing.T) {
	t.Parallel()
	connect := connectToAServer(t)
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	// A coordinator that takes every submit and answers none.
	behind := connect()
	loud := make(chan struct{}, 64)
	if _, err := behind.Subscribe("toolbus.api.calls.submit", func(m *nats.Msg) {
		var sr messages.SubmitRequest
		if _, err := messages.Decode(messages.Header(m.Header), m.Data, &sr); err == nil && !sr.Quiet {
			loud <- struct{}{}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := behind.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := New(connect(), Options{Agent: "a", HedgeAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w, err := startRouteWait(ctx, c, messages.SubmitRequest{Tool: "t-count", Arguments: messages.JSON(`{}`)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.rc.hedges = 3 // the quiet rounds are over
	w.sendCopies()
	select {
	case <-loud:
	case <-ctx.Done():
		t.Fatal("the submit sent as a request never reached the coordinator")
	}
	answered := w.loud
	w.close()
	// Bounded well below the test's own deadline: the request it ended
	// answers at once, one left running only when the test's context ends.
	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case a := <-answered:
		if !errors.Is(a.err, context.Canceled) {
			t.Fatalf("the submit sent as a request ended with %+v, %v; want it ended by the wait's end", a.reply, a.err)
		}
	case <-bounded.Done():
		t.Fatal("the submit sent as a request goes on after the call's wait ended")
	}
}
