package messages

import "strings"

// NoTurn is the turn token of the queued event of a call made outside
// any turn: a character no turn ID may hold, so no turn's calls are
// mistaken for turnless ones.
const NoTurn = "~"

// EventNames are the subjects a call's events are stored under in the
// events stream, <prefix>.events.<bucket>.<call ID>.<kind>.<namespace>,
// and their parsing. Get them from Names.Events.
type EventNames struct {
	prefix string
}

// Queued is where a call's queued event is stored:
// <prefix>.events.<bucket>.<call ID>.queued.<turn>.<namespace>, the turn
// being NoTurn for a call made outside any turn and the bucket the turn's
// (TurnBucket). The event is the call's record, its work item (its
// namespace's consumer filters FilterNames.NamespaceQueue) and its entry in its
// turn's index (FilterNames.TurnQueue). Every other event of the call is stored
// under the same bucket (Subject).
func (n EventNames) Queued(callID, turn, ns string) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if turn == "" {
		turn = NoTurn
	} else if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".events." + TurnBucket(turn) + "." + callID + "." + string(EventQueued) + "." + turn + "." + ns, nil
}

// Subject is where events of one kind but queued of one call are
// stored: <prefix>.events.<bucket>.<call ID>.<kind>.<namespace>, the
// bucket being that of the call's turn (the one its queued event's
// subject names, see Queued) and the namespace that of the called
// tool. The last token lets the server confine a worker's writes and
// reads to its own namespace's calls; namespace and bucket let every
// reader tell a call's events from events written under its ID
// elsewhere.
func (n EventNames) Subject(bucket, callID string, kind EventKind, ns string) (string, error) {
	if kind == EventQueued {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "names the turn too: see EventNames.Queued"}
	}
	if err := validateBucket(bucket); err != nil {
		return "", err
	}
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if !kind.Valid() {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "is not a known event kind"}
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".events." + bucket + "." + callID + "." + string(kind) + "." + ns, nil
}

// Parse reads the call ID, kind and namespace of an event
// subject made by Subject or Queued. ok is false for any other
// subject.
func (n EventNames) Parse(subject string) (callID string, kind EventKind, ns string, ok bool) {
	tokens, count, found := n.tokens(subject)
	if !found {
		return "", "", "", false
	}
	if count == 5 {
		return tokens[1], EventQueued, tokens[4], true
	}
	return tokens[1], EventKind(tokens[2]), tokens[3], true
}

// tokens returns the tokens after "<prefix>.events." of an event
// subject: bucket, call ID, kind and namespace, with the turn before the
// namespace for a queued event; count is how many there are (4, or 5 for
// a queued event). found is false for any other subject. The tokens are
// returned in an array, not a slice: every event a process reads is
// parsed, and a slice would be an allocation each.
func (n EventNames) tokens(subject string) (tokens [5]string, count int, found bool) {
	rest, found := strings.CutPrefix(subject, n.prefix+".events.")
	if !found {
		return tokens, 0, false
	}
	for more := true; more; count++ {
		if count == len(tokens) {
			return tokens, 0, false
		}
		tokens[count], rest, more = strings.Cut(rest, ".")
	}
	if validateBucket(tokens[0]) != nil {
		return tokens, 0, false
	}
	switch {
	case count == 4 && tokens[2] != string(EventQueued):
		return tokens, count, true
	case count == 5 && tokens[2] == string(EventQueued):
		return tokens, count, true
	}
	return tokens, 0, false
}

// Bucket returns the bucket token of an event subject, or "" when
// subject is not one.
func (n EventNames) Bucket(subject string) string {
	tokens, _, found := n.tokens(subject)
	if !found {
		return ""
	}
	return tokens[0]
}

// Turn returns the turn a queued event's subject names, "" for a
// call outside any turn; ok is false when subject is no queued event's.
func (n EventNames) Turn(subject string) (turn string, ok bool) {
	tokens, count, found := n.tokens(subject)
	if !found || count != 5 {
		return "", false
	}
	if tokens[3] == NoTurn {
		return "", true
	}
	return tokens[3], true
}

// Namespace returns the namespace token of an event subject, or ""
// when subject is not one.
func (n EventNames) Namespace(subject string) string {
	_, _, ns, _ := n.Parse(subject)
	return ns
}

// validateBucket reports whether b is a bucket TurnBucket can return.
func validateBucket(b string) error {
	if len(b) != 2 || b[0] < '0' || b[0] > '3' || !(b[1] >= '0' && b[1] <= '9' || b[1] >= 'a' && b[1] <= 'f') {
		return &NameError{Kind: "turn bucket", Value: b, Reason: `must be two lowercase hexadecimal digits from "00" to "3f"`}
	}
	return nil
}
