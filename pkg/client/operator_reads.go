package client

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Reads for operators, answered by the coordinator: a client whose user
// has no JetStream (an operator of an installation with identities) reads
// the audit log, the live workers, the statistics of the last hour and a
// call's trace this way. With identities the coordinator refuses
// audit.list, workers.list and stats.calls with forbidden unless the
// client's user is an operator.

// ListAudit returns a page of the audit log, newest record first
// (audit.list); pass the reply's NextCursor as the next request's Cursor
// for the following page.
func (c *Client) ListAudit(ctx context.Context, req messages.AuditListRequest) (*messages.AuditListReply, error) {
	var out messages.AuditListReply
	return &out, c.request(ctx, messages.EndpointAuditList, &req, &out, scan, 0)
}

// ListWorkers returns the live workers with their busy and total slots
// (workers.list), of one namespace or, with "", of all.
func (c *Client) ListWorkers(ctx context.Context, namespace string) (*messages.WorkersListReply, error) {
	var out messages.WorkersListReply
	return &out, c.request(ctx, messages.EndpointWorkersList, &messages.WorkersListRequest{Namespace: namespace}, &out, read, 0)
}

// CallStats returns the statistics of the calls of the last minutes
// (stats.calls): how many entered each state, minute by minute, and by
// namespace their queue waits, run times and queue depths. It costs the
// coordinator a scan of up to seconds: it is sent without the copies
// other reads are hedged with, and each attempt waits Options.RequestTimeout
// and 25 s more for the answer. A coordinator older than stats.calls does
// not answer it: the error is messages.ErrNoResponders.
func (c *Client) CallStats(ctx context.Context, req messages.CallStatsRequest) (*messages.CallStatsReply, error) {
	var out messages.CallStatsReply
	return &out, c.request(ctx, messages.EndpointStatsCalls, &req, &out, scan, 0)
}

// GetTraced is Get with the call's trace ID (CallInfo.TraceID), which
// costs the coordinator one more read; operators get it from Get too.
func (c *Client) GetTraced(ctx context.Context, callID string) (*messages.CallInfo, error) {
	var out messages.CallInfo
	return &out, c.request(ctx, messages.EndpointCallsGet, &messages.GetCallRequest{CallID: callID, Trace: true}, &out, read, 0)
}
