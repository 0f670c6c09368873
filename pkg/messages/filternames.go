package messages

// FilterNames are the subject filters by which consumers, direct gets and
// subscriptions pick the messages of one call, turn, namespace or event
// kind. Get them from Names.Filters.
type FilterNames struct {
	prefix string
}

// NamespaceCalls matched every call of one namespace in the calls
// stream of version 2. Since version 3 the namespace's consumer filters
// NamespaceQueue.
func (n FilterNames) NamespaceCalls(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".call." + ns + ".>", nil
}

// NamespaceQueue matches the queued events of one namespace's calls:
// the filter of the namespace's consumer on the events stream, whose
// messages are the namespace's work items.
func (n FilterNames) NamespaceQueue(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".events.*.*." + string(EventQueued) + ".*." + ns, nil
}

// TurnQueue matches the queued events of one turn's calls, of every
// namespace: the turn's index. Its bucket is literal, so the server walks
// only the calls of the turn's bucket.
func (n FilterNames) TurnQueue(turn string) (string, error) {
	if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	return n.prefix + ".events." + TurnBucket(turn) + ".*." + string(EventQueued) + "." + turn + ".*", nil
}

// Event matches the events of one kind of one call written under
// bucket and namespace ns: EventNames.Subject, and for kind queued the queued
// event of any turn.
func (n FilterNames) Event(bucket, callID string, kind EventKind, ns string) (string, error) {
	if kind != EventQueued {
		return EventNames(n).Subject(bucket, callID, kind, ns)
	}
	if err := validateBucket(bucket); err != nil {
		return "", err
	}
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".events." + bucket + "." + callID + "." + string(EventQueued) + ".*." + ns, nil
}

// CallEvents matches every event of one call, of any bucket and
// namespace: the server walks the buckets, not every call.
func (n FilterNames) CallEvents(callID string) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	return n.prefix + ".events.*." + callID + ".>", nil
}

// CallNamespaceEvents matches every event of one call written
// under bucket and namespace ns but its queued event, whose subject names
// the turn too (EventNames.Queued).
func (n FilterNames) CallNamespaceEvents(bucket, callID, ns string) (string, error) {
	if err := validateBucket(bucket); err != nil {
		return "", err
	}
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".events." + bucket + "." + callID + ".*." + ns, nil
}

// CallResult is the subject of a call's result under its bucket
// and namespace: the condition of a result's (and a start's) write, so
// that the first result wins. Readers take a call's bucket and namespace
// from its queued event and ignore events under any other, so a condition
// on every bucket (a leading wildcard, whose check walks every bucket on
// each write) would protect no reader.
func (n FilterNames) CallResult(bucket, callID, ns string) (string, error) {
	return EventNames(n).Subject(bucket, callID, EventResult, ns)
}

// CallQueued matches the queued events of one call in one bucket,
// of any turn and namespace: the condition of a queued event's write.
func (n FilterNames) CallQueued(bucket, callID string) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if err := validateBucket(bucket); err != nil {
		return "", err
	}
	return n.prefix + ".events." + bucket + "." + callID + "." + string(EventQueued) + ".*.*", nil
}

// CallKind matches the events of one kind of one call, of any
// bucket and namespace (and for kind queued, of any turn).
func (n FilterNames) CallKind(callID string, kind EventKind) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if !kind.Valid() {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "is not a known event kind"}
	}
	return n.prefix + ".events.*." + callID + "." + string(kind) + kindTail(kind), nil
}

// EventKind matches the events of one kind of every call, e.g. every
// result (and for kind queued, of every turn).
func (n FilterNames) EventKind(kind EventKind) (string, error) {
	if !kind.Valid() {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "is not a known event kind"}
	}
	return n.prefix + ".events.*.*." + string(kind) + kindTail(kind), nil
}

// Cancel matches the cancel signals of one namespace.
func (n FilterNames) Cancel(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".cancel." + ns + ".*", nil
}

// kindTail is what follows the kind in an event subject: the namespace,
// after the turn for a queued event.
func kindTail(kind EventKind) string {
	if kind == EventQueued {
		return ".*.*"
	}
	return ".*"
}
