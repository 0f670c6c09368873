// Package transport is where Toolbus speaks raw JetStream: the one package
// that builds JetStream API subjects ($JS.API.…) and reads the replies the
// server sends to them. Everything else reaches JetStream through it or
// through nats.go's jetstream package; a test (boundary_test.go) fails if
// another package builds such a subject.
//
// What lives here:
//
//   - Inbox: one wildcard subscription that receives the replies of many
//     requests, each on a subject of its own, without a subscription per
//     request.
//   - Publisher: publishes to a stream and reads the acknowledgement on an
//     Inbox, without a future per message or JSON decoding of a successful
//     acknowledgement (PublishThen, PublishWait).
//   - Stream: direct gets of one stream, the last message on a subject
//     (GetLast, the subject in the API subject, where permissions can
//     scope it) and batches (GetBatch, the subjects in the body): the last
//     message of many subjects at once, or the messages from a sequence on.
//   - The pull requests of the worker's consumers.
//   - Retry and RetryPolicy: the one policy of bounded attempts and
//     retries with capped, jittered exponential backoff, with Transient to
//     tell failures that may pass from those that will not. Stream's reads
//     follow ReadPolicy; Publisher.PublishRetrying sends a message again
//     only when that cannot store it twice, and the ledger's writes go
//     through it with WritePolicy.
//
// Errors are recognised with errors.Is and errors.As: ErrNoResponders,
// ErrNotFound, ErrWrongLastSequence, ErrWriteInProcess, *StatusError, and the
// *jetstream.APIError of a stream's refusal. Every call that waits takes a
// context, and bounds its wait by a default when the context has no
// deadline.
package transport
