package messages

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Header names and values of the wire contract.
const (
	HeaderContentType = "Content-Type"
	HeaderVersion     = "Toolbus-Version"
	// HeaderDeadline carries, on a cancel notice, the deadline of the call
	// it cancels (RFC 3339), past which no worker starts the call.
	HeaderDeadline = "Toolbus-Deadline"
	// HeaderMsgID is JetStream's de-duplication header; a call's queued
	// event carries "<call ID>.queued" in it, a cancelled result
	// CancelledMsgID.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderAwaiting marks the queued event of a call that waits for a
	// decision (value AwaitingApproval): the record of the call, not yet
	// work. Its namespace's workers acknowledge it without running the
	// call; the approval writes the call's queued event again, unmarked.
	HeaderAwaiting   = "Toolbus-Awaiting"
	AwaitingApproval = "approval"
	// HeaderReplyToken is a request's proof of its answers: the
	// coordinator copies it, when valid (ValidReplyToken), onto every
	// answer it sends to the request's reply subject. A client whose
	// answers arrive on a subject that another user can name as the reply
	// subject of a request of its own (a call's route) sends a fresh,
	// unguessable token with each request and takes only the answers that
	// carry it: the server does not check whose a reply subject is.
	HeaderReplyToken = "Toolbus-Reply-Token"
	// HeaderReceipt on a request names a subject of one of the
	// requester's routes (RouteNames.CallSubject of a call ID on the
	// route) to which the coordinator that takes the request says so at
	// once: before it works on the request it sends there a message
	// without a body whose HeaderReceipt is ReceiptSent, and later its
	// answer to the reply subject as usual. A client holding a long wait
	// (wait_ms) learns within moments that a live coordinator has it, and
	// sends a copy elsewhere when no receipt comes. The receipt goes to a
	// route rather than to the reply subject because an answer that
	// crosses an account import may be only one message. A subject that
	// is not such a route subject, or (with identities) not on a route of
	// the requester's user, gets no receipt.
	HeaderReceipt = "Toolbus-Receipt"
	ReceiptSent   = "received"
	// HeaderTraceParent and HeaderTraceState carry W3C trace context. NATS
	// headers are case-sensitive, so they are always written in lowercase.
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"

	// MaxReplyTokenLength bounds a reply token (HeaderReplyToken).
	MaxReplyTokenLength = 128

	ContentTypeMsgpack = "application/msgpack"
	ContentTypeJSON    = "application/json"

	// ProtocolVersion is the major version of this contract. A message with
	// another major version is refused with CodeUnsupportedVersion.
	// Version 2 put the called tool's namespace at the end of every call
	// event's subject (and of routed results' subjects). Version 3 made a
	// call's queued event, whose subject names the call's turn too, its
	// work item and its turn's index: workers take calls from their
	// namespace's consumer on the events stream, and neither the calls
	// stream nor the turns bucket is written per call.
	ProtocolVersion = "3"
	// PreviousProtocolVersion is the major version before ProtocolVersion,
	// whose requests the coordinator's API still answers (protocol.md,
	// Compatibility): its request and reply bodies are version 3's.
	PreviousProtocolVersion = "2"
)

// NoticeVersion labels (Toolbus-Version) the queued events of
// coordinators that send a call's cancel notice before they decide whether
// its queued event was delivered (protocol.md, "Cancel notices"): a
// worker that heard every notice may run such a call without reading its
// record first. Its major version is ProtocolVersion: a reader of version 3
// reads it as its own.
const NoticeVersion = ProtocolVersion + ".1"

// SendsNotices tells whether a queued event's Toolbus-Version says its
// coordinator sends cancel notices first: version 3.1 or later.
func SendsNotices(version string) bool {
	major, ok := MajorVersion(version)
	if !ok {
		return false
	}
	m, _ := strconv.Atoi(major)
	current, _ := strconv.Atoi(ProtocolVersion)
	if m != current {
		return m > current
	}
	_, rest, found := strings.Cut(version, ".")
	if !found {
		return false
	}
	minor, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(minor)
	return err == nil && n >= 1
}

// APIVersions are the major versions whose requests the coordinator's
// API endpoints answer, newest first: this one and the one before.
var APIVersions = []string{ProtocolVersion, PreviousProtocolVersion}

// Header is a message's header map; nats.Header converts to it directly.
type Header = map[string][]string

// Codec is one of the two encodings of the contract.
type Codec int

const (
	Msgpack Codec = iota
	JSONCodec
)

// ContentType returns the Content-Type header value of the codec.
func (c Codec) ContentType() string {
	if c == JSONCodec {
		return ContentTypeJSON
	}
	return ContentTypeMsgpack
}

func (c Codec) String() string { return c.ContentType() }

// CodecOf reads a message's codec from its headers: MessagePack unless
// Content-Type says application/json. It refuses unknown content types and
// protocol versions other than ProtocolVersion, so that a peer speaking
// another contract hears why; the codec it returns with a refusal is the
// one to answer the refusal in: the request's own, and JSON for a content
// type that is neither encoding.
func CodecOf(h Header) (Codec, error) {
	c, _, err := requestCodec(h, headerValue, ProtocolVersion)
	return c, err
}

// RequestCodec is CodecOf for a request that may be answered in any of
// versions (major versions, as MajorVersion writes them): it returns the
// codec and the major version to answer in, the request's own. A request
// without Toolbus-Version is read as ProtocolVersion, whatever versions
// holds. With no versions, every version is answered (the version the
// answer is in is then the request's when it is ProtocolVersion or
// PreviousProtocolVersion, else ProtocolVersion). Its header names are
// matched without regard to case when none matches exactly.
func RequestCodec(h Header, versions ...string) (Codec, string, error) {
	return requestCodec(h, requestHeaderValue, versions...)
}

func requestCodec(h Header, value func(Header, string) string, versions ...string) (Codec, string, error) {
	c, ctErr := codecOf(value(h, HeaderContentType))
	v := value(h, HeaderVersion)
	if v == "" {
		return c, ProtocolVersion, ctErr
	}
	major, ok := MajorVersion(v)
	switch {
	case len(versions) == 0:
		if !ok || (major != ProtocolVersion && major != PreviousProtocolVersion) {
			major = ProtocolVersion
		}
		return c, major, ctErr
	case !ok:
		return c, ProtocolVersion, &Error{Code: CodeUnsupportedVersion, Message: fmt.Sprintf("%s %q is not a protocol version: its major version, the digits before the first '.', must be a number; %s", HeaderVersion, v, answered(versions))}
	case !slices.Contains(versions, major):
		return c, ProtocolVersion, &Error{Code: CodeUnsupportedVersion, Message: fmt.Sprintf("protocol version %q is not supported; %s%s", v, answered(versions), versionChanges(major))}
	}
	return c, major, ctErr
}

// answered says which versions a peer speaks.
func answered(versions []string) string {
	if len(versions) == 1 {
		return "this peer speaks version " + versions[0]
	}
	return "this peer answers versions " + strings.Join(versions, " and ")
}

// marshalJSON is json.Marshal without its escaping of <, > and & as
// \u003c, \u003e and \u0026, which is for JSON put inside HTML: a text
// full of them would grow sixfold, and a reply that fits in MessagePack
// could pass the server's message size in JSON.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// requestHeaderValue is a request header's first value, its name matched
// without regard to case when no header has it exactly: NATS header names
// are case-sensitive, and clients that write them in lower case are
// understood rather than answered in the wrong encoding.
func requestHeaderValue(h Header, key string) string {
	if v := headerValue(h, key); v != "" {
		return v
	}
	if _, exact := h[key]; exact {
		return ""
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// codecOf reads a Content-Type.
func codecOf(ct string) (Codec, error) {
	switch ct {
	case "", ContentTypeMsgpack:
		return Msgpack, nil
	case ContentTypeJSON:
		return JSONCodec, nil
	}
	// A Content-Type that is neither encoding is refused in JSON: the
	// caller evidently does not speak the default, MessagePack.
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return JSONCodec, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("unreadable Content-Type %q", ct)}
	}
	switch mt {
	case ContentTypeJSON:
		return JSONCodec, nil
	case ContentTypeMsgpack, "application/x-msgpack", "application/vnd.msgpack":
		return Msgpack, nil
	}
	return JSONCodec, &Error{Code: CodeBadRequest, Message: fmt.Sprintf("unsupported Content-Type %q; use %s or %s", ct, ContentTypeMsgpack, ContentTypeJSON)}
}

// versionChanges says what changed since an older major version, for a
// peer that still speaks it.
func versionChanges(major string) string {
	const v3 = "since version 3, a call's queued event, on <prefix>.events.<turn bucket>.<call_id>.queued.<turn or ~>.<namespace>, is its work item and its turn's index, and every other event of the call is on <prefix>.events.<turn bucket>.<call_id>.<kind>.<namespace>: workers pull the queued event from their namespace's consumer ns_<namespace> on the events stream (filter <prefix>.events.*.*.queued.*.<namespace>), and the calls stream, <prefix>.call.<namespace>.<tool> and the turns bucket's calls.<turn>.<call_id> keys are no longer used"
	switch major {
	case "1":
		return " (since version 2, call event subjects end with the tool's namespace: <prefix>.events.<call_id>.<kind>.<namespace>, and routed results arrive on <prefix>.results.<route>.<rest of the call ID>.<namespace>; " + v3 + ")"
	case "2":
		return " (" + v3 + ")"
	}
	return ""
}

// MajorVersion reads the major version of a Toolbus-Version value: the
// decimal number before its first '.' (the whole value when it has none),
// written without leading zeros. "3", "3.1" and "03" are all "3"; ok is
// false for a value whose major version is not a number ("", "v3", "3 ").
func MajorVersion(v string) (major string, ok bool) {
	if i := strings.IndexByte(v, '.'); i >= 0 {
		v = v[:i]
	}
	if v == "" || len(v) > 9 {
		return "", false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return "", false
		}
		n = n*10 + int(v[i]-'0')
	}
	return strconv.Itoa(n), true
}

func headerValue(h Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Header values shared by every message. Full slices (len == cap), so an
// append to one copies it instead of writing into the shared array.
var (
	jsonValue    = []string{ContentTypeJSON}[:1:1]
	versionValue = []string{ProtocolVersion}[:1:1]
)

// SetHeaders writes the codec's headers into h: the version, and
// Content-Type for JSON. MessagePack, the default, goes without one: every
// header costs each hop that parses it (JetStream scans a stored
// message's headers several times), and the call path is all hops.
func (c Codec) SetHeaders(h Header) {
	if c == JSONCodec {
		h[HeaderContentType] = jsonValue
	} else {
		delete(h, HeaderContentType)
	}
	h[HeaderVersion] = versionValue
}

// NewHeader returns headers that announce the codec and protocol version.
func (c Codec) NewHeader() Header {
	h := make(Header, 4)
	c.SetHeaders(h)
	return h
}

// previousValue is PreviousProtocolVersion as a header value.
var previousValue = []string{PreviousProtocolVersion}[:1:1]

// ReplyHeader returns the headers of a reply in the codec to a request of
// major version version (RequestCodec's): a reply is labelled with the
// version it answers in.
func (c Codec) ReplyHeader(version string) Header {
	h := c.NewHeader()
	switch version {
	case ProtocolVersion:
	case PreviousProtocolVersion:
		h[HeaderVersion] = previousValue
	default:
		h[HeaderVersion] = []string{version}
	}
	return h
}

var encoderPool = sync.Pool{New: func() any {
	enc := msgpack.NewEncoder(nil)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	return enc
}}

var bufferPool = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 1024)) }}

// pooledDecoder is a decoder with the reader it reads from.
type pooledDecoder struct {
	dec *msgpack.Decoder
	r   bytes.Reader
}

var decoderPool = sync.Pool{New: func() any {
	d := &pooledDecoder{dec: msgpack.NewDecoder(nil)}
	d.dec.SetCustomStructTag("json")
	return d
}}

// maxMessageDepth is how deeply maps and arrays may nest in a message read
// by the Decoder: a JSON value's MaxJSONDepth within the message's own
// levels.
const maxMessageDepth = MaxJSONDepth + 32

// maxPooledBuffer is the largest input after which a decoder goes back
// to the pool. The Decoder keeps the buffer it read strings into, and that
// buffer grows to the longest string of the input.
const maxPooledBuffer = 64 << 10

// decodeReflect decodes one value from data into v with a msgpack.Decoder
// and returns the number of bytes after it.
//
// The input is walked first, so that every length it declares is known to
// fit in it: the Decoder allocates what a length prefix promises before it
// finds the bytes missing, and a 12-byte message can promise 4 GiB. The
// walk also bounds the nesting (maxMessageDepth), since the Decoder
// recurses into every level of a field it skips. Afterwards, times that
// JSON cannot hold are refused (checkTimes).
func decodeReflect(data []byte, v any) (left int, err error) {
	scan := reader{b: data}
	if err := scan.skipWithin(maxMessageDepth); err != nil {
		return len(data), err
	}
	d := decoderPool.Get().(*pooledDecoder)
	defer func() {
		// The Decoder misuses reflect on some input, such as a nil in
		// place of a time.Time field; that is malformed input, not a
		// reason to crash. The Decoder is dropped, in whatever state.
		if p := recover(); p != nil {
			if _, ok := p.(*reflect.ValueError); !ok {
				panic(p)
			}
			err = fmt.Errorf("msgpack: %v", p)
		}
	}()
	d.r.Reset(data)
	d.dec.ResetReader(&d.r)
	err = d.dec.Decode(v)
	if err == nil {
		err = checkTimes(reflect.ValueOf(v))
	}
	left = d.r.Len()
	d.dec.ResetReader(nil)
	d.r.Reset(nil)
	if err == nil && len(data) <= maxPooledBuffer {
		decoderPool.Put(d)
	}
	return left, err
}

// Marshal encodes v. Struct fields are named by their json tags in both
// encodings, so the two never drift apart.
func (c Codec) Marshal(v any) ([]byte, error) {
	if c == JSONCodec {
		return marshalJSON(v)
	}
	if m, ok := v.(msgpackAppender); ok {
		return appendMarshal(m)
	}
	return encodeReflect(v)
}

// encodeReflect encodes v with the msgpack library.
func encodeReflect(v any) ([]byte, error) {
	buf := bufferPool.Get().(*bytes.Buffer)
	buf.Reset()
	enc := encoderPool.Get().(*msgpack.Encoder)
	enc.ResetWriter(buf)
	err := enc.Encode(v)
	enc.ResetWriter(nil)
	encoderPool.Put(enc)
	var out []byte
	if err == nil {
		out = bytes.Clone(buf.Bytes())
	}
	if buf.Cap() <= maxPooledBuffer {
		bufferPool.Put(buf)
	}
	return out, err
}

// Unmarshal decodes data into v. Unknown fields are ignored, so that newer
// peers can add them; anything else that is not one well-formed value, such
// as trailing bytes, is a CodeMalformed error.
func (c Codec) Unmarshal(data []byte, v any) error {
	if c == JSONCodec {
		dec := json.NewDecoder(bytes.NewReader(data))
		if err := dec.Decode(v); err != nil {
			return malformed(c, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return malformed(c, fmt.Errorf("trailing data after the value"))
		}
		return nil
	}
	var left int
	if fd, ok := v.(fastDecoder); ok && !reflect.ValueOf(v).IsNil() {
		// The messages of the call path are read without the Decoder.
		if len(data) > 0 && data[0] == msgpcode.Nil {
			// A nil message zeroes v, as the Decoder has it.
			reflect.ValueOf(v).Elem().SetZero()
			left = len(data) - 1
		} else {
			n, err := fd.decodeBytes(data)
			if err != nil {
				return malformed(c, err)
			}
			left = len(data) - n
		}
	} else {
		var err error
		if left, err = decodeReflect(data, v); err != nil {
			return malformed(c, err)
		}
	}
	if left != 0 {
		return malformed(c, fmt.Errorf("%d trailing bytes after the value", left))
	}
	return nil
}

// malformed is the error of a message that could not be decoded: CodeMalformed,
// or CodeBadRequest when a value exceeds a limit (MaxJSONDepth).
func malformed(c Codec, err error) error {
	if e := (*Error)(nil); errors.As(err, &e) && (e == errTooDeep || e == errMessageTooDeep) {
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("%s message refused: %s", c.ContentType(), e.Message)}
	}
	return &Error{Code: CodeMalformed, Message: fmt.Sprintf("malformed %s message: %v", c.ContentType(), err)}
}

// DecodeStored is Decode for a call event read from the events stream:
// events stored by version 2 peers, whose layout version 3 kept, are read
// too, so that calls recorded before an upgrade stay readable.
func DecodeStored(h Header, data []byte, v any) (Codec, error) {
	if headerValue(h, HeaderVersion) == "2" {
		h = maps.Clone(h)
		h[HeaderVersion] = versionValue
	}
	return Decode(h, data, v)
}

// Decode reads a message: the codec from its headers, then the value.
func Decode(h Header, data []byte, v any) (Codec, error) {
	c, err := CodecOf(h)
	if err != nil {
		return c, err
	}
	return c, c.Unmarshal(data, v)
}

// ValidReplyToken reports whether a request's reply token
// (HeaderReplyToken) is one the coordinator copies onto its answers: 16
// to MaxReplyTokenLength letters, digits, '-' and '_'. Any other value
// is not copied, and its answers go without one.
func ValidReplyToken(token string) bool {
	if len(token) < 16 || len(token) > MaxReplyTokenLength {
		return false
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CancelledMsgID is the Nats-Msg-Id of a call's cancelled result, written
// by the coordinator that cancels the call before its delivery and by the
// worker that finds the cancel notice as the call reaches it. On a
// replicated stream the coordinator's condition (on every event of the
// call, a subject filter) does not see the worker's result while it is
// being replicated, so both could be stored; with one message ID the
// second is dropped as a duplicate, or refused while the first is in
// process.
func CancelledMsgID(callID string) string { return callID + ".cancelled" }
