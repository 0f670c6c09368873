package coordinator

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// fullResultOverhead is what a calls.full_result reply needs beside its
// data: the IDs, sizes, digest and cursor, and the codec's framing.
const fullResultOverhead = 1024

// fullResult answers calls.full_result: a page of the whole of a call's
// result that its worker cut to the tool's size limit and kept in the
// namespace's results store. It answers only to whoever may read the
// call, and reads only the object named by the call's ID in the store of
// the call's own namespace, whatever reference a worker wrote: a worker
// cannot make it read another namespace's results.
func (f *follower) fullResult(ctx context.Context, r *messages.FullResultRequest) (*messages.FullResultReply, error) {
	cur, err := parseResultCursor(r.Cursor)
	if err != nil {
		return nil, err
	}
	snap, err := f.calls.snapshot(ctx, r.CallID)
	if err != nil {
		return nil, unavailable(err, "read call %s", r.CallID)
	}
	if !snap.Exists() {
		return nil, messages.Errorf(messages.CodeCallNotFound, "no call %s (calls are kept for %v)", r.CallID, f.calls.kept)
	}
	if err := mayReadCall(ctx, snap); err != nil {
		return nil, err
	}
	var res *messages.CallResult
	if snap.Result != nil {
		res = snap.Result.Result
	}
	switch {
	case res == nil:
		return nil, messages.Errorf(messages.CodeBadRequest, "call %s has no result yet", r.CallID)
	case !res.Truncated:
		return nil, messages.Errorf(messages.CodeBadRequest, "the result of call %s was not cut: calls.get has all of it", r.CallID)
	case res.FullResult == nil:
		return nil, messages.Errorf(messages.CodeCallNotFound, "the result of call %s was cut without a copy: its worker could not store the whole", r.CallID)
	}
	bucket, err := f.names.NamespaceResultsBucket(snap.Namespace)
	if err != nil {
		return nil, messages.Errorf(messages.CodeCallNotFound, "call %s has no results store: %v", r.CallID, err)
	}
	// A store that never answers (a read its user may not send goes
	// unanswered) fails the request as unavailable, within the bound of
	// the coordinator's other reads.
	bound := f.calls.wait
	if bound <= 0 {
		bound = DefaultUnavailableWait
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	store := transport.NewStream(f.nc, nil, "OBJ_"+bucket)
	info, err := readObjectInfo(ctx, store, bucket, r.CallID)
	if err != nil {
		return nil, err
	}
	if cur.nuid != "" && cur.nuid != info.NUID {
		return nil, messages.Errorf(messages.CodeConflict, "the whole result of call %s was stored again since the cursor was given; read it from the start, without a cursor", r.CallID)
	}
	reply := &messages.FullResultReply{CallID: r.CallID, Size: int64(info.Size), Digest: info.Digest, Offset: cur.offset}
	if uint64(cur.offset) >= info.Size {
		return reply, nil
	}
	budget := max(replyBudget(f.nc)-fullResultOverhead, 1)
	chunk := int(jetstreamChunkSize(info))
	last := cur.seq
	err = store.GetBatch(ctx, transport.BatchRequest{
		Seq:           cur.seq + 1,
		NextBySubject: "$O." + bucket + ".C." + info.NUID,
		Batch:         max(budget/chunk, 1),
	}, func(seq uint64, msg *nats.Msg) bool {
		if len(reply.Data) > 0 && len(reply.Data)+len(msg.Data) > budget {
			return false
		}
		reply.Data = append(reply.Data, msg.Data...)
		last = seq
		return uint64(cur.offset)+uint64(len(reply.Data)) < info.Size
	})
	if err != nil {
		return nil, unavailable(err, "read the whole result of call %s", r.CallID)
	}
	end := uint64(cur.offset) + uint64(len(reply.Data))
	switch {
	case len(reply.Data) == 0 || end > info.Size:
		// The object's chunks are not all there: it is being replaced.
		return nil, messages.Errorf(messages.CodeConflict, "the whole result of call %s is being stored again; read it from the start, without a cursor", r.CallID)
	case end < info.Size:
		reply.NextCursor = resultCursor{nuid: info.NUID, seq: last, offset: int64(end)}.String()
	}
	return reply, nil
}

// readObjectInfo reads the description of the object name in the object
// store bucket, through its stream.
func readObjectInfo(ctx context.Context, store *transport.Stream, bucket, name string) (*jetstream.ObjectInfo, error) {
	msg, _, err := store.GetLast(ctx, "$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(name)))
	if errors.Is(err, transport.ErrNotFound) || errors.Is(err, transport.ErrNoResponders) {
		return nil, messages.Errorf(messages.CodeCallNotFound, "the whole result of call %s is no longer kept", name)
	}
	if err != nil {
		return nil, unavailable(err, "read the whole result of call %s", name)
	}
	var info jetstream.ObjectInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return nil, messages.Errorf(messages.CodeInternal, "the whole result of call %s has an unreadable description: %v", name, err)
	}
	if info.Deleted || info.NUID == "" {
		return nil, messages.Errorf(messages.CodeCallNotFound, "the whole result of call %s is no longer kept", name)
	}
	return &info, nil
}

// jetstreamChunkSize is the largest chunk of an object, as its writer set
// it (NATS object stores cut objects into chunks of 128 KiB by default).
func jetstreamChunkSize(info *jetstream.ObjectInfo) uint32 {
	if info.Opts != nil && info.Opts.ChunkSize > 0 {
		return info.Opts.ChunkSize
	}
	return 128 << 10
}

// resultCursor is where a page of a whole result ends: the object's
// NUID (a new one each time the object is stored), the stream sequence of
// the page's last chunk, and the offset of the next byte.
type resultCursor struct {
	nuid   string
	seq    uint64
	offset int64
}

func (c resultCursor) String() string {
	return "v1." + c.nuid + "." + strconv.FormatUint(c.seq, 10) + "." + strconv.FormatInt(c.offset, 10)
}

// parseResultCursor reads a cursor of resultCursor.String; an empty one
// is the start.
func parseResultCursor(s string) (resultCursor, error) {
	if s == "" {
		return resultCursor{}, nil
	}
	bad := func(why string) (resultCursor, error) {
		return resultCursor{}, messages.Errorf(messages.CodeBadRequest, "cursor %q %s; send the next_cursor of an earlier reply, or none", s, why)
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return bad("is not a cursor of calls.full_result")
	}
	if err := messages.ValidateID("cursor's object", parts[1]); err != nil {
		return bad("names no object")
	}
	seq, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil || seq == 0 {
		return bad("has no stream sequence")
	}
	offset, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || offset <= 0 {
		return bad("has no offset")
	}
	return resultCursor{nuid: parts[1], seq: seq, offset: offset}, nil
}
