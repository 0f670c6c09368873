package mcpfront

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestStdioDropsTheAnswerOfACancelledRequest: over stdio, the answer to a
// request the client cancelled is not written; notifications and the
// answers to other requests are.
func TestStdioDropsTheAnswerOfACancelledRequest(t *testing.T) {
	var out bytes.Buffer
	l := &lineWriter{w: &out}
	l.cancel(json.RawMessage(` 7 `))
	lines := []string{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":1}}` + "\n",
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"context canceled"}}` + "\n",
		`{"jsonrpc":"2.0","id":8,"result":{}}` + "\n",
		`{"jsonrpc":"2.0","id":7,"result":{}}` + "\n",
	}
	for _, line := range lines {
		if n, err := l.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	// The second answer of ID 7 is another request's: the client may use
	// an ID again once its request is done.
	want := lines[0] + lines[2] + lines[3]
	if out.String() != want {
		t.Fatalf("written:\n%s\nwant:\n%s", out.String(), want)
	}
}
