package ledger_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/ledger"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
)

// A routed result can arrive before the submit's reply has named the call;
// it waits for the caller instead of being dropped.
func TestRoutedResultBeforeItsCallerWaits(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	nc := testenv.Connect(t, srv.URL())
	names := messages.MustNames("")
	routes := ledger.NewRoutes(nc, names)
	defer routes.Close()
	route, err := routes.Route()
	if err != nil {
		t.Fatal(err)
	}
	early, waited, last := route+"aaaaaaaaaaaaaaaaaaaaaa", route+"bbbbbbbbbbbbbbbbbbbbbb", route+"cccccccccccccccccccccc"
	waitedCh, waitedDone := routes.Await(waited)
	defer waitedDone()
	lastCh, lastDone := routes.Await(last)
	defer lastDone()
	pub := testenv.Connect(t, srv.URL())
	for _, id := range []string{early, waited, last} {
		if err := pub.Publish("toolbus.results."+route+"."+id[len(route):], []byte(id)); err != nil {
			t.Fatal(err)
		}
	}
	// Results are dispatched in order: once the last is in, the early one
	// has arrived with nobody waiting for it.
	select {
	case <-lastCh:
	case <-time.After(10 * time.Second):
		t.Fatal("no result for the last call")
	}
	earlyCh, earlyDone := routes.Await(early)
	defer earlyDone()
	for id, ch := range map[string]<-chan *nats.Msg{early: earlyCh, waited: waitedCh} {
		select {
		case msg := <-ch:
			if string(msg.Data) != id {
				t.Fatalf("waiter of %s got %q", id, msg.Data)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no result for %s", id)
		}
	}
}
