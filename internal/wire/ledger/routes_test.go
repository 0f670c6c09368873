package ledger_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/ledger"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Messages on a route reach the caller awaiting their call: both an
// answer to the submit and the result written under the tool's namespace;
// a message of a call nobody awaits reaches nobody, and a result written
// under another namespace is dropped.
func TestRoutesDispatchByCall(t *testing.T) {
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
	// The messages come from another connection: the server must have the
	// subscription first.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	abandoned, first, second := route+"aaaaaaaaaaaaaaaaaaaaaa", route+"bbbbbbbbbbbbbbbbbbbbbb", route+"cccccccccccccccccccccc"
	firstCh, firstDone := routes.Await(first, "demo")
	defer firstDone()
	secondCh, secondDone := routes.Await(second, "demo")
	defer secondDone()
	pub := testenv.Connect(t, srv.URL())
	send := func(id, ns, body string) {
		t.Helper()
		subject, err := names.Routes().CallSubject(id)
		if ns != "" {
			subject, err = names.Routes().ResultSubject(id, ns)
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := pub.Publish(subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	send(abandoned, "", "abandoned")
	send(first, "", "answer")
	send(first, "payments", "forged result")
	send(first, "demo", "result")
	send(second, "payments", "forged result")
	send(second, "demo", "result")
	receive := func(ch <-chan *nats.Msg, want string) {
		t.Helper()
		select {
		case msg := <-ch:
			if string(msg.Data) != want {
				t.Fatalf("got %q, want %q", msg.Data, want)
			}
		case <-time.After(testenv.Patience):
			t.Fatalf("no %q", want)
		}
	}
	// Messages are dispatched in order: once the second call's result is
	// in, the abandoned call's message has been dropped.
	receive(secondCh, "result")
	receive(firstCh, "answer")
	receive(firstCh, "result")
	select {
	case msg := <-firstCh:
		t.Fatalf("first call got another message %q", msg.Data)
	case msg := <-secondCh:
		t.Fatalf("second call got another message %q", msg.Data)
	default:
	}
}

// TestWaitsConfirmAtTheLeaderAsTheyLengthen: a wait's periodic checks ask
// the leader at the 1st, 2nd, 4th, 8th… check and at no other, so that a
// lagging replica cannot hide a result for ever, and a long wait costs the
// leader a read only each time its length doubles.
func TestWaitsConfirmAtTheLeaderAsTheyLengthen(t *testing.T) {
	var at []int
	for n := range 70 {
		if ledger.ConfirmsAtLeader(n) {
			at = append(at, n)
		}
	}
	if want := []int{1, 2, 4, 8, 16, 32, 64}; !slices.Equal(at, want) {
		t.Fatalf("leader reads at checks %v, want %v", at, want)
	}
}

// TestFailedLeaderConfirmationIsAskedAgain: a confirmation at the leader
// that failed (the stream electing a leader as the wait's 4th check
// reads) is not counted: the next check asks the leader again, rather
// than waiting for the 8th, and once one succeeds the doubling goes on.
func TestFailedLeaderConfirmationIsAskedAgain(t *testing.T) {
	var c ledger.LeaderChecks
	var at []int
	for check := 1; check <= 12; check++ {
		confirm := c.Next()
		if confirm {
			at = append(at, check)
		}
		if check == 4 || check == 5 {
			c.Failed(confirm) // the leader did not answer checks 4 and 5
		}
		if check == 8 {
			c.Failed(confirm) // a replica's read failed: nothing to take back
		}
	}
	if want := []int{1, 2, 4, 5, 6, 10}; !slices.Equal(at, want) {
		t.Fatalf("leader reads at checks %v, want %v", at, want)
	}
	c.Restart()
	if !c.Next() {
		t.Fatal("the first check after a restart does not confirm at the leader")
	}
}
