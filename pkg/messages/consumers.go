package messages

import (
	"strings"
	"time"
)

// ConsumerRequest is what a namespace's worker sends the coordinators on
// ConsumerNames.RequestSubject(namespace) when it starts: the settings of the
// namespace's consumer on the events stream, which the coordinator
// creates or updates to them (the namespace's last started worker's
// settings apply). Workers do not create consumers themselves: a
// consumer's configuration names where the stream delivers, and a user
// that could create one could have the stream store what it delivers on
// another namespace's subjects. The reply is a ConsumerReply.
type ConsumerRequest struct {
	// MaxConcurrency is the namespace's limit of calls in progress across
	// all its workers: the consumer's MaxAckPending.
	MaxConcurrency int `json:"max_concurrency"`
	// AckWaitMS is how long a worker may hold a call without renewing its
	// lease before it is delivered again.
	AckWaitMS int64 `json:"ack_wait_ms"`
	// MaxAttempts is how many times a call is delivered to run; the
	// consumer delivers it once more, for its worker to record the failure.
	MaxAttempts int `json:"max_attempts"`
	// Worker names the worker that asks, for the coordinator's log.
	Worker string `json:"worker_id,omitempty"`
}

// ConsumerReply names the consumer, configured as asked.
type ConsumerReply struct {
	Consumer string `json:"consumer"`
}

// Ranges of a ConsumerRequest's fields.
const (
	MaxConsumerConcurrency = 1_000_000
	MinConsumerAckWaitMS   = 3
	MaxConsumerAckWaitMS   = int64(7 * 24 * time.Hour / time.Millisecond)
	MaxConsumerAttempts    = 1000
)

// Validate checks the ranges: max_concurrency 1 to 1,000,000, ack_wait_ms
// 3 to 7 days, max_attempts 1 to 1,000, and the worker ID.
func (r *ConsumerRequest) Validate() error {
	return firstError(
		validateRange("max_concurrency", int64(r.MaxConcurrency), 1, MaxConsumerConcurrency),
		validateRange("ack_wait_ms", r.AckWaitMS, MinConsumerAckWaitMS, MaxConsumerAckWaitMS),
		validateRange("max_attempts", int64(r.MaxAttempts), 1, MaxConsumerAttempts),
		optionalID("worker_id", r.Worker),
	)
}

// ConsumerNames are the names of the namespaces' consumers on the events
// stream and of the subjects on which workers ask the coordinators for
// them. Get them from Names.Consumers.
type ConsumerNames struct {
	prefix string
}

// Durable is the durable pull consumer on the events stream
// that a namespace's workers share (filter FilterNames.NamespaceQueue).
func (n ConsumerNames) Durable(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return "ns_" + ns, nil
}

// RequestSubject is where a namespace's workers ask the coordinators for
// the namespace's consumer (a ConsumerRequest): <prefix>.consumers.<namespace>.
// The namespace is the subject's, so that the server can confine a
// worker's user to asking for its own namespace's consumer.
func (n ConsumerNames) RequestSubject(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".consumers." + ns, nil
}

// RequestFilter matches every namespace's RequestSubject.
func (n ConsumerNames) RequestFilter() string { return n.prefix + ".consumers.*" }

// RequestNamespace is the namespace of a RequestSubject, or "" if
// subject is not one.
func (n ConsumerNames) RequestNamespace(subject string) string {
	ns, ok := strings.CutPrefix(subject, n.prefix+".consumers.")
	if !ok || ValidateNamespace(ns) != nil {
		return ""
	}
	return ns
}
