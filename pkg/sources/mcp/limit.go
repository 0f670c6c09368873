package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
)

// maxMessageSize bounds one message from a server: a JSON-RPC line over
// stdio, an event of an SSE stream, a JSON response body. The MCP client
// reads each whole into memory, however long, so a server that sends an
// endless line could take all of the worker's. A larger message is not
// read (see messageLimit): the request it answers fails, and the session
// goes on.
const maxMessageSize = 32 << 20

// maxTools bounds the tools one server may list, across every page.
const maxTools = 10_000

// errMessageTooLarge is why a request whose answer was larger than
// maxMessageSize failed, or why a session ended whose server sent such a
// message that named no request.
var errMessageTooLarge = fmt.Errorf("the server sent a message larger than %d bytes", maxMessageSize)

// skippedMessageCode is the JSON-RPC error code of the response that
// stands in for one too large to read. It is in the range JSON-RPC leaves
// to implementations, which the MCP client turns into an error with the
// response's message alone.
const skippedMessageCode = -32000

// framing says where one message ends and the next begins in a stream.
type framing int

const (
	perLine  framing = iota // stdio: a message a line
	perEvent                // SSE: an event ends at an empty line
	perBody                 // a JSON response body is one message
)

// messageLimit bounds the messages of the stream it reads to limit bytes.
//
// A response body (perBody) is one message, the answer to one request:
// once it exceeds limit, every read fails with errMessageTooLarge, which
// fails that request alone.
//
// In a stream of messages (stdio lines, SSE events), a message that
// exceeds limit is cut where it exceeds it and the rest of it is skipped,
// so that the messages after it are read as before. The part passed on is
// ended as a message of its own, which the MCP client cannot parse and
// drops. While the message passes, rpcScan learns its ID and whether it
// has a method: a response (an ID, no method) is replaced by an error
// response to the same request, whose ID is told to skipped, so that the
// request fails at once; a request or notification of the server is
// dropped; a response without an ID that could be answered tells tooLarge,
// which ends the session, since a request might otherwise wait for it
// forever.
type messageLimit struct {
	r        io.Reader
	framing  framing
	limit    int64
	tooLarge func(error)
	skipped  func(id string)

	message int64 // bytes of the current message
	line    int64 // bytes of the current line, without its end

	exceeded bool // a body over the limit: every read fails
	skipping bool // the rest of the current message is not passed on
	scan     rpcScan
	sse      sseFields

	out    []byte // to pass on before reading more
	unread []byte // read from r, still to follow
	err    error  // r's error, returned once out and unread are drained
}

func (m *messageLimit) Read(p []byte) (int, error) {
	for {
		if len(m.out) > 0 {
			n := copy(p, m.out)
			m.out = m.out[n:]
			return n, nil
		}
		if m.exceeded {
			return 0, errMessageTooLarge
		}
		if len(m.unread) == 0 && m.err != nil {
			return 0, m.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		var n int
		if len(m.unread) > 0 {
			n = copy(p, m.unread)
			m.unread = m.unread[n:]
		} else {
			n, m.err = m.r.Read(p)
		}
		if kept := m.follow(p[:n]); kept > 0 {
			return kept, nil
		}
	}
}

// follow takes in bytes read and returns how many of them, from the
// start, are passed on; what follows the end of a skipped message is kept
// in unread, to be followed next.
func (m *messageLimit) follow(b []byte) int {
	kept := len(b)
	if m.skipping {
		kept = 0
	}
	for i := 0; i < len(b); i++ {
		if n := m.plainRun(b[i:]); n > 0 {
			m.message += int64(n)
			m.line += int64(n)
			i += n - 1
			continue
		}
		ended := m.step(b[i])
		switch {
		case ended && m.skipping:
			m.skipping = false
			m.out = append(m.out, m.standIn()...)
			m.unread = append(slices.Clone(b[i+1:]), m.unread...)
			m.scan.reset()
			return kept
		case ended:
			m.scan.reset()
		case m.message > m.limit && !m.skipping:
			if m.framing == perBody {
				m.exceeded = true
				return i
			}
			m.skipping, kept = true, i
			m.out = append(m.out, m.cutEnd()...)
		}
	}
	return kept
}

// plainWindow bounds the bytes plainRun looks through at once.
const plainWindow = 4096

// plainRun is how many bytes at the start of b can be counted without a
// look at each: any bytes of a body, or the inside of a JSON string that is
// neither a key nor the ID, up to its next quote, backslash or line end;
// until the limit, at most up to it. It keeps a megabytes-long text result
// from costing a step per byte.
func (m *messageLimit) plainRun(b []byte) int {
	switch {
	case m.framing == perBody:
	case !m.scan.plainString():
		return 0
	case m.framing == perEvent && !m.sse.inData():
		return 0
	}
	n := min(len(b), plainWindow)
	if !m.skipping {
		n = int(min(int64(n), m.limit-m.message))
	}
	if m.framing != perBody {
		for _, c := range []byte{'"', '\\', '\n', '\r'} {
			if j := bytes.IndexByte(b[:n], c); j >= 0 {
				n = j
			}
		}
	}
	return max(n, 0)
}

// step counts one byte of the stream, following the JSON-RPC message it
// belongs to, and reports whether it ended the message.
func (m *messageLimit) step(c byte) bool {
	m.message++
	ended := false
	switch c {
	case '\n':
		ended = m.framing == perLine || m.framing == perEvent && m.line == 0
		m.line = 0
		m.sse.lineEnd()
	case '\r':
	default:
		m.line++
		switch m.framing {
		case perLine:
			m.scan.feed(c)
		case perEvent:
			m.sse.feed(c, &m.scan)
		}
	}
	if ended {
		m.message = 0
		m.sse.eventEnd()
	}
	return ended
}

// cutEnd ends the part of a message passed on before it exceeded the
// limit: a line end over stdio; over SSE, an event of a type no MCP
// client handles, whatever type the message said it was.
func (m *messageLimit) cutEnd() []byte {
	if m.framing == perEvent {
		return []byte("\nevent: toolbus-skipped\n\n")
	}
	return []byte("\n")
}

// standIn is what takes the place of a skipped message once it has ended:
// an error response to the request it answered, or nothing.
func (m *messageLimit) standIn() []byte {
	id, response := m.scan.result()
	switch {
	case !response:
		return nil // a request or notification of the server, dropped
	case id == nil:
		if m.tooLarge != nil {
			m.tooLarge(errMessageTooLarge)
		}
		return nil
	}
	if m.skipped != nil {
		m.skipped(string(id))
	}
	msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": skippedMessageCode, "message": errMessageTooLarge.Error()}})
	if m.framing == perEvent {
		return append(append([]byte("event: message\ndata: "), msg...), "\n\n"...)
	}
	return append(msg, '\n')
}

// limitBody bounds the messages of an HTTP response's body: events of an
// SSE stream, or the whole of any other body (see messageLimit).
func limitBody(resp *http.Response, tooLarge func(error), skipped func(id string)) {
	f := perBody
	if t, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && t == "text/event-stream" {
		f = perEvent
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{&messageLimit{r: resp.Body, framing: f, limit: maxMessageSize, tooLarge: tooLarge, skipped: skipped}, resp.Body}
}

// sseFields passes the data fields of SSE events on to an rpcScan: the
// JSON text of the event's message, its lines joined by line ends.
type sseFields struct {
	inValue   bool   // past the field's name on this line
	name      []byte // the field's name, up to a few bytes
	data      bool   // this line is a data field
	space     bool   // the space that may follow the colon is still to come
	dataLines int    // data lines of this event so far
}

func (f *sseFields) feed(c byte, scan *rpcScan) {
	if !f.inValue {
		if c != ':' {
			if len(f.name) <= len("data") {
				f.name = append(f.name, c)
			}
			return
		}
		f.inValue, f.space = true, true
		f.data = string(f.name) == "data"
		if f.data {
			if f.dataLines > 0 {
				scan.feed('\n')
			}
			f.dataLines++
		}
		return
	}
	if f.space && c == ' ' {
		f.space = false
		return
	}
	f.space = false
	if f.data {
		scan.feed(c)
	}
}

// inData reports whether the bytes that follow are a data field's value.
func (f *sseFields) inData() bool { return f.inValue && f.data && !f.space }

func (f *sseFields) lineEnd() {
	f.inValue, f.data, f.name = false, false, f.name[:0]
}

func (f *sseFields) eventEnd() {
	f.lineEnd()
	f.dataLines = 0
}

// maxIDLength bounds the ID rpcScan keeps; a longer one is not kept.
const maxIDLength = 256

// rpcScan follows the JSON text of one JSON-RPC message a byte at a time,
// in bounded memory, to learn what to do with a message too large to
// read: the ID at its top level, and whether it has a method there.
type rpcScan struct {
	depth      int
	inString   bool
	escaped    bool
	expectKey  bool // at the top level, the next string is a key
	readingKey bool
	keyRead    bool // a top-level key was read; its value follows the colon
	key        []byte
	inID       bool // reading the top-level value of "id"
	idRead     bool
	id         []byte
	idTooLong  bool
	hasMethod  bool
}

func (s *rpcScan) reset() {
	*s = rpcScan{key: s.key[:0], id: s.id[:0]}
}

// plainString reports whether the bytes that follow, up to the next quote,
// backslash or line end, are inside a string the scan need not keep.
func (s *rpcScan) plainString() bool {
	return s.inString && !s.escaped && !s.readingKey && !s.inID
}

func (s *rpcScan) feed(c byte) {
	if s.inString {
		switch {
		case s.escaped:
			s.escaped = false
		case c == '\\':
			s.escaped = true
		case c == '"':
			s.inString = false
		}
		if s.readingKey {
			if s.inString {
				if len(s.key) <= len("method") {
					s.key = append(s.key, c)
				}
			} else {
				s.readingKey, s.keyRead = false, true
			}
			return
		}
		s.keepID(c)
		return
	}
	switch c {
	case ' ', '\t', '\n', '\r':
		return
	case '"':
		s.inString = true
		if s.depth == 1 && s.expectKey {
			s.expectKey, s.readingKey, s.key = false, true, s.key[:0]
			return
		}
	case ':':
		if s.depth == 1 && s.keyRead {
			s.keyRead = false
			switch string(s.key) {
			case "id":
				s.inID, s.idRead, s.id, s.idTooLong = true, false, s.id[:0], false
			case "method":
				s.hasMethod = true
			}
			return
		}
	case ',':
		if s.depth == 1 {
			s.endValue()
			s.expectKey = true
			return
		}
	case '{', '[':
		s.depth++
		if s.depth == 1 {
			s.expectKey = c == '{'
			return
		}
	case '}', ']':
		if s.depth == 1 {
			s.endValue()
		}
		s.depth--
		if s.depth <= 0 {
			return
		}
	}
	s.keepID(c)
}

func (s *rpcScan) keepID(c byte) {
	if !s.inID {
		return
	}
	if len(s.id) >= maxIDLength {
		s.idTooLong = true
		return
	}
	s.id = append(s.id, c)
}

func (s *rpcScan) endValue() {
	if s.inID {
		s.inID, s.idRead = false, true
	}
}

// result is the message's ID, nil unless it is one a response may name
// (a string or a number), and whether the message is a response (it has
// no method).
func (s *rpcScan) result() (json.RawMessage, bool) {
	response := !s.hasMethod
	if !s.idRead || s.idTooLong || len(s.id) == 0 || !json.Valid(s.id) {
		return nil, response
	}
	if c := s.id[0]; c != '"' && c != '-' && (c < '0' || c > '9') {
		return nil, response
	}
	return slices.Clone(s.id), response
}
