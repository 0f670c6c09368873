package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Reads for operators: the audit log (audit.list), the live workers
// (workers.list) and a call's trace ID (calls.get). They serve the admin
// console, whose operator's user has no JetStream in a deployment with
// identities: the coordinator reads for it.

// requireOperator refuses, with forbidden, and audits a request of
// endpoint whose authenticated caller is not an operator. Without
// identities the caller is trusted, as every request of one account is.
func requireOperator(ctx context.Context, endpoint string) error {
	id := identityOf(ctx)
	if id == nil {
		return nil
	}
	err := id.operator(endpoint)
	if err != nil && id.refused != nil {
		id.refused("", err)
	}
	return err
}

const (
	// AuditListScanBudget bounds the audit records one audit.list request
	// reads while it looks for its page. When it runs out first, the
	// reply holds the matches found so far and a cursor that continues.
	AuditListScanBudget = 20_000
	// auditListMaxWindow is the most records one read of the scan spans;
	// the first spans a few per record of the page, each next one twice
	// as many.
	auditListMaxWindow = 4096
	// auditFetchBatch is the most records one fetch of a window asks for.
	auditFetchBatch = 256
	// auditConsumerIdle is how long the server keeps a read's consumer
	// once nothing reads it, should its deletion fail.
	auditConsumerIdle = 10 * time.Second
	// auditListCursorPrefix starts every audit.list cursor: the version of
	// its form, a position (auditPos) in base 36. Cursors of the form
	// before, oldAuditListCursorPrefix and a sequence, are still read.
	auditListCursorPrefix    = "a2."
	oldAuditListCursorPrefix = "a1."
)

// auditPos is a record's position in the audit log: its message's
// sequence, and its index in the message (an AuditBatch holds many
// records, fewer than 1<<16).
func auditPos(seq uint64, idx int) uint64 { return seq<<16 | uint64(idx) }

// auditLog answers audit.list for one request. The audit stream allows
// no direct gets: it is read backwards in windows of sequences, each one
// with a consumer that starts at the window's first sequence (with the
// decision's subject as its filter) and is deleted once read.
type auditLog struct {
	names  messages.Names
	js     jetstream.JetStream
	stream jetstream.Stream
	wait   time.Duration
	// budget is AuditListScanBudget; tests make it smaller.
	budget int
}

// listAudit is audit.list: a page of the audit log, newest record first.
func (c *Coordinator) listAudit(ctx context.Context, r *messages.AuditListRequest) (*messages.AuditListReply, error) {
	if err := requireOperator(ctx, messages.EndpointAuditList); err != nil {
		return nil, err
	}
	l := &auditLog{names: c.names, js: c.js, wait: c.cfg.UnavailableWait, budget: AuditListScanBudget}
	return l.list(ctx, r)
}

// auditEntry is a record the scan kept, with its position (auditPos).
type auditEntry struct {
	pos uint64
	rec messages.AuditRecord
}

func (l *auditLog) list(ctx context.Context, r *messages.AuditListRequest) (*messages.AuditListReply, error) {
	var tool string
	if r.Tool != "" {
		name, err := messages.ParseToolName(r.Tool)
		if err != nil {
			return nil, messages.Errorf(messages.CodeBadRequest, "tool: %v", err)
		}
		tool = name.String()
	}
	var filter []string
	if r.Decision != "" {
		subject, err := l.names.Audit().Subject(r.Decision)
		if err != nil {
			return nil, messages.Errorf(messages.CodeBadRequest, "decision: %v", err)
		}
		filter = []string{subject}
		if r.Decision == messages.AuditAllowed || r.Decision == messages.AuditRemembered {
			// Those of queued calls are copied in batches.
			calls, _ := l.names.Audit().Subject(messages.AuditCalls)
			filter = append(filter, calls)
		}
	}
	limit := r.Limit
	if limit == 0 {
		limit = messages.DefaultAuditListLimit
	}
	reply := &messages.AuditListReply{Records: []messages.AuditRecord{}}
	top, floor, below, err := l.scanRange(ctx, r)
	if err != nil || top <= floor {
		return reply, err
	}
	keep := func(rec *messages.AuditRecord) bool {
		if r.Decision != "" && rec.Decision != r.Decision {
			return false
		}
		if r.Agent != "" && rec.Agent != r.Agent {
			return false
		}
		if tool != "" {
			name, err := messages.ParseToolName(rec.Tool)
			return err == nil && name.String() == tool
		}
		return true
	}

	// One match more than the page tells whether an older one exists.
	want := limit + 1
	var found []auditEntry
	hi, window, scanned := top, uint64(4*want+64), 0
	for hi > floor && len(found) < want && scanned < l.budget {
		span := min(window, hi-floor, uint64(l.budget-scanned))
		lo := hi - span
		got, err := l.window(ctx, lo, hi, below, want-len(found), filter, keep)
		if err != nil {
			return nil, err
		}
		found = append(found, got...)
		scanned += int(span)
		hi = lo
		window = min(2*window, auditListMaxWindow)
	}
	switch {
	case len(found) > limit:
		found = found[:limit]
		reply.NextCursor = auditListCursor(found[limit-1].pos)
	case hi > floor:
		reply.NextCursor = auditListCursor(auditPos(hi, 0)) // the budget ran out first
	}
	for _, e := range found {
		reply.Records = append(reply.Records, e.rec)
	}
	return reply, nil
}

// scanRange returns the sequences the request's scan reads, [floor, top):
// from the newest record, or the cursor, or until, down to the first, or
// since; and the position (auditPos) the records must be below.
func (l *auditLog) scanRange(ctx context.Context, r *messages.AuditListRequest) (top, floor, below uint64, err error) {
	below = math.MaxUint64
	var cursor uint64
	if r.Cursor != "" {
		if below, err = parseAuditListCursor(r.Cursor); err != nil {
			return 0, 0, 0, err
		}
		// The records of the cursor's message below its index are left.
		cursor = below >> 16
		if below&0xffff != 0 {
			cursor++
		}
	}
	err = l.retry(ctx, func(ctx context.Context) error {
		s, err := l.js.Stream(ctx, l.names.Audit().Stream())
		if err != nil {
			return err
		}
		l.stream = s
		return nil
	})
	if err != nil {
		return 0, 0, 0, unavailable(err, "read the audit stream's state")
	}
	st := l.stream.CachedInfo().State
	if st.LastSeq == 0 {
		return 0, 0, 0, nil // nothing was ever recorded
	}
	top, floor = st.LastSeq+1, max(st.FirstSeq, 1)
	if cursor > top {
		return 0, 0, 0, messages.Errorf(messages.CodeBadRequest, "cursor %q is past the end of the audit log: pass the next_cursor of a reply unchanged", r.Cursor)
	}
	if cursor != 0 {
		top = cursor
	}
	if !r.Until.IsZero() {
		seq, err := l.seqAt(ctx, r.Until, st.LastSeq)
		if err != nil {
			return 0, 0, 0, err
		}
		top = min(top, seq)
	}
	if !r.Since.IsZero() {
		seq, err := l.seqAt(ctx, r.Since, st.LastSeq)
		if err != nil {
			return 0, 0, 0, err
		}
		floor = max(floor, seq)
	}
	return top, floor, below, nil
}

// seqAt returns the sequence of the first record stored at or after t,
// or last+1 when there is none.
func (l *auditLog) seqAt(ctx context.Context, t time.Time, last uint64) (uint64, error) {
	var seq uint64
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t}
	err := l.read(ctx, cfg, 1, func() { seq = last + 1 }, func(s uint64, _ jetstream.Msg) bool {
		seq = s
		return false
	})
	if err != nil {
		return 0, unavailable(err, "find the audit records stored at %s", t.Format(time.RFC3339Nano))
	}
	return seq, nil
}

// window reads the records of sequences [lo, hi), below the position
// below, that the filter subjects and keep let through, and returns the
// newest room of them, newest first: those older would not be on the
// page. A message on the calls subject is an AuditBatch, whose records
// are read in order.
func (l *auditLog) window(ctx context.Context, lo, hi, below uint64, room int, filter []string, keep func(*messages.AuditRecord) bool) ([]auditEntry, error) {
	var out []auditEntry
	add := func(pos uint64, rec *messages.AuditRecord) {
		if pos >= below || !keep(rec) {
			return
		}
		if len(out) == room {
			out = append(out[:0], out[1:]...)
		}
		out = append(out, auditEntry{pos: pos, rec: *rec})
	}
	calls, _ := l.names.Audit().Subject(messages.AuditCalls)
	cfg := jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: lo, FilterSubjects: filter}
	err := l.read(ctx, cfg, auditFetchBatch, func() { out = out[:0] }, func(seq uint64, msg jetstream.Msg) bool {
		if seq >= hi {
			return false
		}
		if msg.Subject() == calls {
			var batch messages.AuditBatch
			if _, err := messages.Decode(messages.Header(msg.Headers()), msg.Data(), &batch); err == nil {
				for i := range batch.Records {
					add(auditPos(seq, i), &batch.Records[i])
				}
			}
			return true
		}
		var rec messages.AuditRecord
		if _, err := messages.Decode(messages.Header(msg.Headers()), msg.Data(), &rec); err == nil {
			add(auditPos(seq, 0), &rec)
		}
		return true
	})
	if err != nil {
		return nil, unavailable(err, "read the audit log")
	}
	slices.Reverse(out)
	return out, nil
}

// read hands the records a consumer of cfg delivers to each, in stream
// order and fetched batchSize at a time, until each returns false or none
// is left, retrying while
// JetStream does not answer; begin starts each attempt afresh. The
// consumer (ephemeral, in memory, without acknowledgements) is deleted
// afterwards.
func (l *auditLog) read(ctx context.Context, cfg jetstream.ConsumerConfig, batchSize int, begin func(), each func(seq uint64, msg jetstream.Msg) bool) error {
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage = true
	cfg.Replicas = 1
	cfg.InactiveThreshold = auditConsumerIdle
	return l.retry(ctx, func(ctx context.Context) error {
		begin()
		cons, err := l.stream.CreateConsumer(ctx, cfg)
		if err != nil {
			return err
		}
		defer l.deleteConsumer(cons)
		for {
			batch, err := cons.FetchNoWait(batchSize)
			if err != nil {
				return err
			}
			got := 0
			for msg := range batch.Messages() {
				got++
				meta, err := msg.Metadata()
				if err != nil {
					continue
				}
				if !each(meta.Sequence.Stream, msg) {
					return nil
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
				return err
			}
			if got < batchSize {
				return nil
			}
		}
	})
}

// deleteConsumer deletes a read's consumer; if that fails the server
// drops it after auditConsumerIdle.
func (l *auditLog) deleteConsumer(cons jetstream.Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	if info := cons.CachedInfo(); info != nil {
		_ = l.stream.DeleteConsumer(ctx, info.Name)
	}
}

func (l *auditLog) retry(ctx context.Context, op func(ctx context.Context) error) error {
	return retryRead(ctx, l.wait, op)
}

// auditListCursor is the cursor that continues a scan below the position
// pos (auditPos).
func auditListCursor(pos uint64) string { return seqCursor(auditListCursorPrefix, pos) }

// parseAuditListCursor reads a cursor made by auditListCursor, or by the
// form before it (a sequence), and returns its position.
func parseAuditListCursor(cursor string) (uint64, error) {
	if strings.HasPrefix(cursor, oldAuditListCursorPrefix) {
		seq, err := parseSeqCursor(oldAuditListCursorPrefix, messages.EndpointAuditList, cursor)
		if err != nil || seq > math.MaxUint64>>16 {
			return 0, messages.Errorf(messages.CodeBadRequest, "cursor %q is not one %s gave: pass the next_cursor of a reply unchanged", cursor, messages.EndpointAuditList)
		}
		return auditPos(seq, 0), nil
	}
	return parseSeqCursor(auditListCursorPrefix, messages.EndpointAuditList, cursor)
}

// workersListBatch is the most heartbeats one read of workers.list asks
// for; workersListScan bounds the heartbeats and deletion markers one
// request reads in all.
const (
	workersListBatch = 1024
	workersListScan  = 16 * workersListBatch
)

// listWorkers is workers.list: the live workers, from their heartbeats in
// the catalog bucket, read with batched direct gets. A worker is alive
// while three of its heartbeat intervals have not passed since the server
// stored its latest heartbeat, as the coordinators' catalog views judge.
func (c *Coordinator) listWorkers(ctx context.Context, r *messages.WorkersListRequest) (*messages.WorkersListReply, error) {
	if err := requireOperator(ctx, messages.EndpointWorkersList); err != nil {
		return nil, err
	}
	filter := "$KV." + c.names.CatalogBucket() + ".workers.>"
	if r.Namespace != "" {
		filter = "$KV." + c.names.CatalogBucket() + ".workers." + r.Namespace + ".>"
	}
	bucket := transport.NewStream(c.nc, nil, "KV_"+c.names.CatalogBucket())
	reply := &messages.WorkersListReply{Workers: []messages.WorkerHeartbeat{}}
	now := time.Now()
	for next, read := uint64(1), 0; read < workersListScan; {
		got := 0
		var last uint64
		err := retryTransient(ctx, c.cfg.UnavailableWait, func(ctx context.Context) error {
			got = 0
			req := transport.BatchRequest{Seq: next, NextBySubject: filter, Batch: workersListBatch}
			return bucket.GetBatch(ctx, req, func(seq uint64, msg *nats.Msg) bool {
				got++
				last = seq
				if hb, ok := liveHeartbeat(msg, now); ok {
					reply.Workers = append(reply.Workers, hb)
				}
				return true
			})
		})
		if err != nil {
			return nil, unavailable(err, "read the workers' heartbeats")
		}
		read += got
		if got < workersListBatch {
			break
		}
		next = last + 1
	}
	slices.SortFunc(reply.Workers, func(a, b messages.WorkerHeartbeat) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	if len(reply.Workers) > messages.MaxWorkersListed {
		reply.Workers, reply.Truncated = reply.Workers[:messages.MaxWorkersListed], true
	}
	return reply, nil
}

// liveHeartbeat decodes a catalog message that is the heartbeat of a
// worker alive at now: neither a deletion marker nor one whose worker
// missed three heartbeats since the server stored it.
func liveHeartbeat(msg *nats.Msg, now time.Time) (messages.WorkerHeartbeat, bool) {
	var hb messages.WorkerHeartbeat
	if op := msg.Header.Get("KV-Operation"); op != "" || len(msg.Data) == 0 {
		return hb, false // DEL or PURGE
	}
	if json.Unmarshal(msg.Data, &hb) != nil || hb.IntervalMS <= 0 {
		return hb, false
	}
	stored, err := time.Parse(time.RFC3339Nano, msg.Header.Get(nats.JSTimeStamp))
	if err != nil {
		stored = hb.Time
	}
	if now.Sub(stored) >= 3*time.Duration(hb.IntervalMS)*time.Millisecond {
		return hb, false
	}
	return hb, true
}

// getCallTraced is calls.get with the call's trace ID, for a request that
// asks for it and for operators.
func (c *Coordinator) getCallTraced(ctx context.Context, gr *messages.GetCallRequest) (*messages.CallInfo, error) {
	info, err := c.follower.getCall(ctx, gr)
	if err != nil || !(gr.Trace || isOperator(ctx)) {
		return info, err
	}
	info.TraceID = c.traceID(ctx, info)
	return info, nil
}

// isOperator reports whether the request's authenticated caller is an operator.
func isOperator(ctx context.Context) bool {
	id := identityOf(ctx)
	return id != nil && id.user.Operator
}

// traceID reads the trace ID of the traceparent header the call's queued
// event was stored with (one direct get of its subject): the trace the
// worker's run of the call joins. A call that waited for an approval was
// queued again by the decision, in its submit's trace (see
// approvals.release). It is "" when the
// event has none or cannot be read: the call is answered all the same.
func (c *Coordinator) traceID(ctx context.Context, info *messages.CallInfo) string {
	name, err := messages.ParseToolName(info.Tool)
	if err != nil {
		return ""
	}
	subject, err := c.names.Events().Queued(info.CallID, info.Turn, name.Namespace)
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	msg, _, err := transport.NewStream(c.nc, nil, c.names.EventsStream()).GetLast(ctx, subject)
	if err != nil {
		if !errors.Is(err, transport.ErrNotFound) {
			c.log.Debug("trace ID not read", "call_id", info.CallID, "error", err)
		}
		return ""
	}
	return ParseTraceID(msg.Header.Get(messages.HeaderTraceParent))
}

// ParseTraceID returns the trace ID of a W3C traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"), or "" when it is not one or its
// trace ID is all zeros (invalid).
func ParseTraceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || parts[1] == strings.Repeat("0", 32) {
		return ""
	}
	for _, r := range parts[1] {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return ""
		}
	}
	return parts[1]
}
