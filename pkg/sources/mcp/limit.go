package mcp

import (
	"fmt"
	"io"
	"mime"
	"net/http"
)

// maxMessageSize bounds one message from a server: a JSON-RPC line over
// stdio, an event of an SSE stream, a JSON response body. The MCP client
// reads each whole into memory, however long, so a server that sends an
// endless line could take all of the worker's. A larger message ends the
// session, as a broken connection does.
const maxMessageSize = 32 << 20

// maxTools bounds the tools one server may list, across every page.
const maxTools = 10_000

// errMessageTooLarge is why a session whose server sent a message larger
// than maxMessageSize ended.
var errMessageTooLarge = fmt.Errorf("the server sent a message larger than %d bytes", maxMessageSize)

// framing says where one message ends and the next begins in a stream.
type framing int

const (
	perLine  framing = iota // stdio: a message a line
	perEvent                // SSE: an event ends at an empty line
	perBody                 // a JSON response body is one message
)

// messageLimit fails a read once one message of the stream it reads
// exceeds limit bytes, telling tooLarge, and fails every read after that.
type messageLimit struct {
	r        io.Reader
	framing  framing
	limit    int64
	tooLarge func(error)
	message  int64 // bytes of the current message
	line     int64 // bytes of the current line, without its end
	exceeded bool
}

func (m *messageLimit) Read(p []byte) (int, error) {
	if m.exceeded {
		return 0, errMessageTooLarge
	}
	n, err := m.r.Read(p)
	for _, c := range p[:n] {
		m.message++
		switch c {
		case '\n':
			if m.framing == perLine || m.framing == perEvent && m.line == 0 {
				m.message = 0
			}
			m.line = 0
		case '\r':
		default:
			m.line++
		}
		if m.message > m.limit {
			m.exceeded = true
			if m.tooLarge != nil {
				m.tooLarge(errMessageTooLarge)
			}
			return 0, errMessageTooLarge
		}
	}
	return n, err
}

// limitBody bounds the messages of an HTTP response's body: events of an
// SSE stream, or the whole of any other body.
func limitBody(resp *http.Response, tooLarge func(error)) {
	f := perBody
	if t, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && t == "text/event-stream" {
		f = perEvent
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{&messageLimit{r: resp.Body, framing: f, limit: maxMessageSize, tooLarge: tooLarge}, resp.Body}
}
