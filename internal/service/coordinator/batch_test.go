package coordinator

import (
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/toolformat"
)

func TestIdempotencyKey(t *testing.T) {
	withID := toolformat.Call{ID: "call_1", Name: "t-add", Arguments: messages.JSON(`{"a":1}`)}
	if got := idempotencyKey("t1", "r", 0, &withID); got != "t1/call_1" {
		t.Errorf("key of a call with an ID = %q", got)
	}
	a := toolformat.Call{Name: "t-add", Arguments: messages.JSON(`{"a":1,"b":2}`)}
	reordered := toolformat.Call{Name: "t-add", Arguments: messages.JSON(`{ "b": 2, "a": 1 }`)}
	base := idempotencyKey("t1", "r", 0, &a)
	if !strings.HasPrefix(base, "t1/#") || len(base) > messages.MaxIdempotencyKeyLength {
		t.Errorf("derived key %q", base)
	}
	if idempotencyKey("t1", "r", 0, &reordered) != base {
		t.Error("the same arguments written otherwise give another key")
	}
	for name, key := range map[string]string{
		"another position": idempotencyKey("t1", "r", 1, &a),
		"another response": idempotencyKey("t1", "r2", 0, &a),
		"another turn":     idempotencyKey("t2", "r", 0, &a),
		"other arguments":  idempotencyKey("t1", "r", 0, &toolformat.Call{Name: "t-add", Arguments: messages.JSON(`{"a":2}`)}),
		"another tool":     idempotencyKey("t1", "r", 0, &toolformat.Call{Name: "t-sub", Arguments: a.Arguments}),
	} {
		if key == base {
			t.Errorf("%s gives the same key", name)
		}
	}
	long := toolformat.Call{ID: strings.Repeat("x", messages.MaxToolCallIDLength)}
	if k := idempotencyKey(strings.Repeat("t", 128), "", 0, &long); len(k) > messages.MaxIdempotencyKeyLength {
		t.Errorf("key of the longest turn and ID is %d bytes", len(k))
	}
}
