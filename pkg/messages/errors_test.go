package messages

import (
	"errors"
	"testing"
)

// No responders is a code of its own, so that a client can tell a request
// nobody received from one a coordinator refused as unavailable.
func TestNoRespondersIsACodeOfItsOwn(t *testing.T) {
	t.Parallel()
	err := Errorf(CodeNoResponders, "no coordinator answers on toolbus.api.calls.submit")
	if !errors.Is(err, ErrNoResponders) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("errors.Is(%v): matches %v, want only ErrNoResponders", err, ErrUnavailable)
	}
	if s := CodeNoResponders.Status(); s != 503 {
		t.Fatalf("status of %s is %d, want 503", CodeNoResponders, s)
	}
	if c := CodeOf(err); c != CodeNoResponders {
		t.Fatalf("CodeOf: %s", c)
	}
}
