package instance

import (
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestIDsAreValidAndDistinct(t *testing.T) {
	t.Parallel()
	a, b := ID("worker"), ID("worker")
	if a == b {
		t.Fatalf("two IDs are the same: %s", a)
	}
	for _, id := range []string{a, b} {
		if err := messages.ValidateID("worker ID", id); err != nil {
			t.Fatal(err)
		}
	}
}
