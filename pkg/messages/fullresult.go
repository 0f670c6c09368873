package messages

// EndpointCallsFullResult reads, a page at a time, the whole of a result
// that was cut to its tool's size limit (calls.full_result): for clients
// that cannot read the namespace's results store themselves, such as the
// agents' account of an installation with identities.
const EndpointCallsFullResult = "calls.full_result"

// FullResultRequest asks for one page of a call's whole result, kept in
// its namespace's results store because it was larger than the tool's
// limit (CallResult.Truncated, with FullResult set).
type FullResultRequest struct {
	CallID string `json:"call_id"`
	// Cursor continues from an earlier reply's NextCursor; empty asks
	// for the first page.
	Cursor string `json:"cursor,omitempty"`
}

// FullResultReply is one page of a call's whole result: Data holds the
// bytes from Offset on of the result's JSON encoding, which is Size bytes
// long in all and whose SHA-256 digest is Digest ("SHA-256=" and the
// digest in URL-safe base64). NextCursor asks for the next page; it is
// empty once Data ends the result.
type FullResultReply struct {
	CallID     string `json:"call_id"`
	Size       int64  `json:"size"`
	Digest     string `json:"digest"`
	Offset     int64  `json:"offset"`
	Data       []byte `json:"data"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// MaxCursorLength bounds FullResultRequest.Cursor.
const MaxCursorLength = 128

// Validate checks the call ID and the cursor's length.
func (r *FullResultRequest) Validate() error {
	return firstError(
		requiredID("call_id", "call ID", r.CallID),
		validateRange("length of cursor", int64(len(r.Cursor)), 0, MaxCursorLength),
	)
}
