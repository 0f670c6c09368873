package messages

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
)

// DefaultPrefix is the subject prefix and resource-name stem used when none is configured.
const DefaultPrefix = "toolbus"

// Length limits of the names that end up in subjects and LLM tool names.
const (
	// MaxToolNameLength is the longest canonical tool name: the limit that
	// OpenAI and Anthropic put on function names.
	MaxToolNameLength  = 64
	MaxNamespaceLength = 32
	MaxIDLength        = 128
)

var (
	prefixPattern   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
	endpointPattern = regexp.MustCompile(`^[a-z][a-z_]*(\.[a-z][a-z_]*)?$`)
)

// onlyOf reports whether s is non-empty and every byte of it is an ASCII
// letter, a digit or one of extra. Names are checked on every call, so
// this is a loop rather than a regular expression.
func onlyOf(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// ToolName is a tool's canonical identity: a namespace and a method. Its
// string form is "namespace-method", what a model sees; the namespace never
// holds "-", so the first "-" splits the two.
type ToolName struct {
	Namespace string
	Method    string
}

// String returns the canonical "namespace-method" form.
func (n ToolName) String() string { return n.Namespace + "-" + n.Method }

// Validate reports whether both parts are safe subject tokens and the
// canonical form fits MaxToolNameLength.
func (n ToolName) Validate() error {
	if err := ValidateNamespace(n.Namespace); err != nil {
		return err
	}
	if !onlyOf(n.Method, "_-") {
		return &NameError{Kind: "method", Value: n.Method, Reason: "must be non-empty and hold only letters, digits, '_' and '-'"}
	}
	if l := len(n.String()); l > MaxToolNameLength {
		return &NameError{Kind: "tool name", Value: n.String(), Reason: fmt.Sprintf("is %d characters; at most %d", l, MaxToolNameLength)}
	}
	return nil
}

// ValidateNamespace reports whether ns can be a namespace: letters, digits
// and '_' only, at most MaxNamespaceLength characters.
func ValidateNamespace(ns string) error {
	if !onlyOf(ns, "_") {
		return &NameError{Kind: "namespace", Value: ns, Reason: "must be non-empty and hold only letters, digits and '_'"}
	}
	if len(ns) > MaxNamespaceLength {
		return &NameError{Kind: "namespace", Value: ns, Reason: fmt.Sprintf("is %d characters; at most %d", len(ns), MaxNamespaceLength)}
	}
	return nil
}

// ValidateID reports whether id can be a call, turn, agent or worker ID:
// letters, digits, '_', '-' and '=' only, at most MaxIDLength characters.
// kind names the ID in the error.
func ValidateID(kind, id string) error {
	if !onlyOf(id, "_=-") {
		return &NameError{Kind: kind, Value: id, Reason: "must be non-empty and hold only letters, digits, '_', '-' and '='"}
	}
	if len(id) > MaxIDLength {
		return &NameError{Kind: kind, Value: id, Reason: fmt.Sprintf("is %d characters; at most %d", len(id), MaxIDLength)}
	}
	return nil
}

// ValidateNotify reports whether subject can receive result copies: a
// subject under "_INBOX." without wildcards, at most 256 characters.
func ValidateNotify(subject string) error {
	rest, ok := strings.CutPrefix(subject, "_INBOX.")
	valid := ok && len(subject) <= 256
	for _, token := range strings.Split(rest, ".") {
		valid = valid && onlyOf(token, "_=-")
	}
	if !valid {
		return &NameError{Kind: "notify subject", Value: subject, Reason: `must be a subject under "_INBOX." without wildcards`}
	}
	return nil
}

// SplitToolName splits a tool reference written in any of the spellings
// ParseToolName accepts into its namespace and method, without checking
// them, so that patterns can be read the same way. ok is false when s holds
// no separator.
func SplitToolName(s string) (ns, method string, ok bool) {
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return strings.NewReplacer("/", "_", ".", "_").Replace(s[:i]), s[i+1:], true
	}
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return strings.ReplaceAll(s[:i], "/", "_"), s[i+1:], true
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	if i := strings.IndexByte(s, '-'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// ParseToolName reads a tool reference in any of its spellings:
// "namespace-method", "namespace:method", "namespace/method" and
// "namespace.method" all name the same tool. A nested service "a/b:method"
// maps to namespace "a_b".
func ParseToolName(s string) (ToolName, error) {
	ns, method, ok := SplitToolName(s)
	if !ok {
		return ToolName{}, &NameError{Kind: "tool name", Value: s, Reason: `must name a namespace and a method, as "namespace-method"`}
	}
	n := ToolName{Namespace: ns, Method: method}
	if err := n.Validate(); err != nil {
		return ToolName{}, err
	}
	return n, nil
}

// IdempotentCallID derives the call ID that an idempotency key stands for,
// so that every coordinator maps one (agent, key) pair to one call without
// shared state.
func IdempotentCallID(agent, key string) string {
	sum := sha256.Sum256([]byte(agent + "\x00" + key))
	return "i" + hex.EncodeToString(sum[:16])
}

// NameError reports a name that cannot be used in a subject or as a tool name.
type NameError struct {
	Kind   string
	Value  string
	Reason string
}

func (e *NameError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidName) true for every NameError.
func (e *NameError) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == CodeInvalidName
}

// ErrInvalidName is matched by every NameError.
var ErrInvalidName = &Error{Code: CodeInvalidName}

// Names builds every subject and resource name of one Toolbus installation.
// The zero value is not usable; get one from NewNames.
type Names struct {
	prefix string
	upper  string
}

// NewNames returns the names under prefix, which must be a lowercase letter
// followed by up to 31 lowercase letters, digits or '_'. An empty prefix means
// DefaultPrefix.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixPattern.MatchString(prefix) {
		return Names{}, &NameError{Kind: "prefix", Value: prefix, Reason: "must be a lowercase letter followed by up to 31 lowercase letters, digits or '_'"}
	}
	return Names{prefix: prefix, upper: strings.ToUpper(prefix)}, nil
}

// MustNames is NewNames that panics, for constant prefixes.
func MustNames(prefix string) Names {
	n, err := NewNames(prefix)
	if err != nil {
		panic(err)
	}
	return n
}

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

// CallsStream is the work-queue stream that held call requests until a
// worker acknowledged them, up to protocol version 2. Since version 3 a
// call's queued event is its work item and nothing writes this stream; the
// name stays so that an operator's tools can find an old installation's.
func (n Names) CallsStream() string { return n.upper + "_CALLS" }

// EventsStream is the stream that keeps every call's events for the retention period.
func (n Names) EventsStream() string { return n.upper + "_EVENTS" }

// CallsSubjects is the subject space of CallsStream (version 2).
func (n Names) CallsSubjects() string { return n.prefix + ".call.>" }

// EventsSubjects is the subject space of EventsStream.
func (n Names) EventsSubjects() string { return n.prefix + ".events.>" }

// CallSubject is where a call of the tool was published for its
// namespace's workers up to version 2 (see CallsStream).
func (n Names) CallSubject(tool ToolName) (string, error) {
	if err := tool.Validate(); err != nil {
		return "", err
	}
	return n.prefix + ".call." + tool.Namespace + "." + tool.Method, nil
}

// NamespaceCallsFilter matched every call of one namespace in the calls
// stream of version 2. Since version 3 the namespace's consumer filters
// NamespaceQueueFilter.
func (n Names) NamespaceCallsFilter(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".call." + ns + ".>", nil
}

// CallSubjectNamespace returns the namespace token of a call subject made
// by CallSubject, or "" when subject is not one.
func (n Names) CallSubjectNamespace(subject string) string {
	rest, ok := strings.CutPrefix(subject, n.prefix+".call.")
	if !ok {
		return ""
	}
	ns, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	return ns
}

// NoTurn is the turn token of the queued event of a call made outside
// any turn: a character no turn ID may hold, so no turn's calls are
// mistaken for turnless ones.
const NoTurn = "~"

// QueuedSubject is where a call's queued event is stored:
// <prefix>.events.<bucket>.<call ID>.queued.<turn>.<namespace>, the turn
// being NoTurn for a call made outside any turn and the bucket the turn's
// (TurnBucket). The event is the call's record, its work item (its
// namespace's consumer filters NamespaceQueueFilter) and its entry in its
// turn's index (TurnQueueFilter). Every other event of the call is stored
// under the same bucket (EventSubject).
func (n Names) QueuedSubject(callID, turn, ns string) (string, error) {
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

// validateBucket reports whether b is a bucket TurnBucket can return.
func validateBucket(b string) error {
	if len(b) != 2 || b[0] < '0' || b[0] > '3' || !(b[1] >= '0' && b[1] <= '9' || b[1] >= 'a' && b[1] <= 'f') {
		return &NameError{Kind: "turn bucket", Value: b, Reason: `must be two lowercase hexadecimal digits from "00" to "3f"`}
	}
	return nil
}

// NamespaceQueueFilter matches the queued events of one namespace's calls:
// the filter of the namespace's consumer on the events stream, whose
// messages are the namespace's work items.
func (n Names) NamespaceQueueFilter(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".events.*.*." + string(EventQueued) + ".*." + ns, nil
}

// TurnQueueFilter matches the queued events of one turn's calls, of every
// namespace: the turn's index. Its bucket is literal, so the server walks
// only the calls of the turn's bucket.
func (n Names) TurnQueueFilter(turn string) (string, error) {
	if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	return n.prefix + ".events." + TurnBucket(turn) + ".*." + string(EventQueued) + "." + turn + ".*", nil
}

// NamespaceConsumer is the durable pull consumer on the events stream
// that a namespace's workers share (filter NamespaceQueueFilter).
func (n Names) NamespaceConsumer(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return "ns_" + ns, nil
}

// EventSubject is where events of one kind but queued of one call are
// stored: <prefix>.events.<bucket>.<call ID>.<kind>.<namespace>, the
// bucket being that of the call's turn (the one its queued event's
// subject names, see QueuedSubject) and the namespace that of the called
// tool. The last token lets the server confine a worker's writes and
// reads to its own namespace's calls; namespace and bucket let every
// reader tell a call's events from events written under its ID
// elsewhere.
func (n Names) EventSubject(bucket, callID string, kind EventKind, ns string) (string, error) {
	if kind == EventQueued {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "names the turn too: see QueuedSubject"}
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

// EventFilter matches the events of one kind of one call written under
// bucket and namespace ns: EventSubject, and for kind queued the queued
// event of any turn.
func (n Names) EventFilter(bucket, callID string, kind EventKind, ns string) (string, error) {
	if kind != EventQueued {
		return n.EventSubject(bucket, callID, kind, ns)
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

// ParseEventSubject reads the call ID, kind and namespace of an event
// subject made by EventSubject or QueuedSubject. ok is false for any other
// subject.
func (n Names) ParseEventSubject(subject string) (callID string, kind EventKind, ns string, ok bool) {
	tokens, found := n.eventTokens(subject)
	if !found {
		return "", "", "", false
	}
	if len(tokens) == 5 {
		return tokens[1], EventQueued, tokens[4], true
	}
	return tokens[1], EventKind(tokens[2]), tokens[3], true
}

// eventTokens returns the tokens after "<prefix>.events." of an event
// subject: bucket, call ID, kind and namespace, with the turn before the
// namespace for a queued event. found is false for any other subject.
func (n Names) eventTokens(subject string) (tokens []string, found bool) {
	rest, found := strings.CutPrefix(subject, n.prefix+".events.")
	if !found {
		return nil, false
	}
	tokens = strings.Split(rest, ".")
	if validateBucket(tokens[0]) != nil {
		return nil, false
	}
	switch {
	case len(tokens) == 4 && tokens[2] != string(EventQueued):
		return tokens, true
	case len(tokens) == 5 && tokens[2] == string(EventQueued):
		return tokens, true
	}
	return nil, false
}

// EventBucket returns the bucket token of an event subject, or "" when
// subject is not one.
func (n Names) EventBucket(subject string) string {
	tokens, found := n.eventTokens(subject)
	if !found {
		return ""
	}
	return tokens[0]
}

// QueuedTurn returns the turn a queued event's subject names, "" for a
// call outside any turn; ok is false when subject is no queued event's.
func (n Names) QueuedTurn(subject string) (turn string, ok bool) {
	tokens, found := n.eventTokens(subject)
	if !found || len(tokens) != 5 {
		return "", false
	}
	if tokens[3] == NoTurn {
		return "", true
	}
	return tokens[3], true
}

// EventNamespace returns the namespace token of an event subject, or ""
// when subject is not one.
func (n Names) EventNamespace(subject string) string {
	_, _, ns, _ := n.ParseEventSubject(subject)
	return ns
}

// CallEventsFilter matches every event of one call, of any bucket and
// namespace: the server walks the buckets, not every call.
func (n Names) CallEventsFilter(callID string) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	return n.prefix + ".events.*." + callID + ".>", nil
}

// CallNamespaceEventsFilter matches every event of one call written
// under bucket and namespace ns but its queued event, whose subject names
// the turn too (QueuedSubject).
func (n Names) CallNamespaceEventsFilter(bucket, callID, ns string) (string, error) {
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

// CallResultFilter is the subject of a call's result under its bucket
// and namespace: the condition of a result's (and a start's) write, so
// that the first result wins. Readers take a call's bucket and namespace
// from its queued event and ignore events under any other, so a condition
// on every bucket (a leading wildcard, whose check walks every bucket on
// each write) would protect no reader.
func (n Names) CallResultFilter(bucket, callID, ns string) (string, error) {
	return n.EventSubject(bucket, callID, EventResult, ns)
}

// CallQueuedFilter matches the queued events of one call in one bucket,
// of any turn and namespace: the condition of a queued event's write.
func (n Names) CallQueuedFilter(bucket, callID string) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if err := validateBucket(bucket); err != nil {
		return "", err
	}
	return n.prefix + ".events." + bucket + "." + callID + "." + string(EventQueued) + ".*.*", nil
}

// CallKindFilter matches the events of one kind of one call, of any
// bucket and namespace (and for kind queued, of any turn).
func (n Names) CallKindFilter(callID string, kind EventKind) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	if !kind.Valid() {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "is not a known event kind"}
	}
	return n.prefix + ".events.*." + callID + "." + string(kind) + kindTail(kind), nil
}

// EventKindFilter matches the events of one kind of every call, e.g. every
// result (and for kind queued, of every turn).
func (n Names) EventKindFilter(kind EventKind) (string, error) {
	if !kind.Valid() {
		return "", &NameError{Kind: "event kind", Value: string(kind), Reason: "is not a known event kind"}
	}
	return n.prefix + ".events.*.*." + string(kind) + kindTail(kind), nil
}

// kindTail is what follows the kind in an event subject: the namespace,
// after the turn for a queued event.
func kindTail(kind EventKind) string {
	if kind == EventQueued {
		return ".*.*"
	}
	return ".*"
}

// CancelSubject carries the signal that asks the worker holding a call to
// stop it. The durable record of the cancellation is the call's cancel event.
func (n Names) CancelSubject(ns, callID string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	return n.prefix + ".cancel." + ns + "." + callID, nil
}

// CancelFilter matches the cancel signals of one namespace.
func (n Names) CancelFilter(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".cancel." + ns + ".*", nil
}

// BucketChanges is where the stream of a key-value bucket of the
// installation republishes the headers of the messages it stores under
// the keys matching keys (a subject filter of keys, ">" for all):
// <prefix>.kv.<bucket>.<keys>. A service that may not create consumers
// follows the bucket by reading it after each.
func (n Names) BucketChanges(bucket, keys string) string {
	return n.prefix + ".kv." + bucket + "." + keys
}

// ConsumersSubject is where a namespace's workers ask the coordinators for
// the namespace's consumer (a ConsumerRequest): <prefix>.consumers.<namespace>.
// The namespace is the subject's, so that the server can confine a
// worker's user to asking for its own namespace's consumer.
func (n Names) ConsumersSubject(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + ".consumers." + ns, nil
}

// ConsumersFilter matches every namespace's ConsumersSubject.
func (n Names) ConsumersFilter() string { return n.prefix + ".consumers.*" }

// ConsumersNamespace is the namespace of a ConsumersSubject, or "" if
// subject is not one.
func (n Names) ConsumersNamespace(subject string) string {
	ns, ok := strings.CutPrefix(subject, n.prefix+".consumers.")
	if !ok || ValidateNamespace(ns) != nil {
		return ""
	}
	return ns
}

// APIGroup is the subject prefix of the coordinator's service endpoints.
func (n Names) APIGroup() string { return n.prefix + ".api" }

// APISubject is the subject of one coordinator endpoint, e.g. "calls.submit".
func (n Names) APISubject(endpoint string) (string, error) {
	if !endpointPattern.MatchString(endpoint) {
		return "", &NameError{Kind: "endpoint", Value: endpoint, Reason: `must look like "calls.submit"`}
	}
	return n.APIGroup() + "." + endpoint, nil
}

// AuditStream is the stream of policy decisions.
func (n Names) AuditStream() string { return n.upper + "_AUDIT" }

// AuditSubject is where decisions of one kind are recorded.
func (n Names) AuditSubject(decision string) (string, error) {
	if err := ValidateID("audit decision", decision); err != nil {
		return "", err
	}
	return n.prefix + ".audit." + decision, nil
}

// AuditSubjects is the subject space of AuditStream.
func (n Names) AuditSubjects() string { return n.prefix + ".audit.>" }

// CatalogBucket is the KV bucket of tool definitions and worker liveness.
func (n Names) CatalogBucket() string { return n.prefix + "_catalog" }

// TurnsBucket is the KV bucket of agent turns.
func (n Names) TurnsBucket() string { return n.prefix + "_turns" }

// ApprovalsBucket is the KV bucket of approvals.
func (n Names) ApprovalsBucket() string { return n.prefix + "_approvals" }

// IndexBucket is the KV bucket that holds the discovery index.
func (n Names) IndexBucket() string { return n.prefix + "_index" }

// UsageBucket is the KV bucket of usage evidence, which discovery learns from.
func (n Names) UsageBucket() string { return n.prefix + "_usage" }

// ResultsBucket is the object store that kept every namespace's results
// too large for one message before each namespace had its own
// (NamespaceResultsBucket). Results stored then name it in their
// full_result reference, and stay readable there.
func (n Names) ResultsBucket() string { return n.prefix + "_results" }

// NamespaceResultsBucket is the object store that keeps the results of
// namespace ns that are too large for one message. The coordinator
// creates it before it queues the namespace's first call; only the
// namespace's workers may write to it.
func (n Names) NamespaceResultsBucket(ns string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	return n.prefix + "_results_" + ns, nil
}

// ToolKey is the catalog key of a tool definition.
func ToolKey(tool ToolName) (string, error) {
	if err := tool.Validate(); err != nil {
		return "", err
	}
	return "tools." + tool.Namespace + "." + tool.Method, nil
}

// WorkerKey is the catalog key of one worker's heartbeat for one namespace.
func WorkerKey(ns, workerID string) (string, error) {
	if err := ValidateNamespace(ns); err != nil {
		return "", err
	}
	if err := ValidateID("worker ID", workerID); err != nil {
		return "", err
	}
	return "workers." + ns + "." + workerID, nil
}

// TurnCallKey is the turns-bucket key that records that a call belongs to a turn.
func TurnCallKey(turn, callID string) (string, error) {
	if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	return "calls." + turn + "." + callID, nil
}

// QueuedEventFilter is CallQueuedFilter of the call whose queued event is
// stored under subject (QueuedSubject, which checked the names in it):
// the subject with its turn and namespace made wildcards. It returns ""
// for a subject that is not a queued event's.
func (n Names) QueuedEventFilter(subject string) string {
	last := strings.LastIndexByte(subject, '.')
	turn := strings.LastIndexByte(subject[:max(last, 0)], '.')
	if last < 0 || turn < 0 || !strings.HasPrefix(subject, n.prefix+".events.") || !strings.HasSuffix(subject[:turn], "."+string(EventQueued)) {
		return ""
	}
	return subject[:turn] + ".*.*"
}

// ApprovalKey is the approvals-bucket key of a call's approval.
func ApprovalKey(callID string) (string, error) {
	if err := ValidateID("call ID", callID); err != nil {
		return "", err
	}
	return "approvals." + callID, nil
}

// GrantKey is the approvals-bucket key of a remembered approval: of a tool
// for an agent in one turn, or in every turn when turn is empty.
func GrantKey(agent, tool, turn string) (string, error) {
	if agent == "" {
		agent = "_"
	} else if err := ValidateID("agent", agent); err != nil {
		return "", err
	}
	if turn == "" {
		turn = "_"
	} else if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	name, err := ParseToolName(tool)
	if err != nil {
		return "", err
	}
	return "grants." + agent + "." + name.String() + "." + turn, nil
}

// TurnStateKey is the turns-bucket key of a turn's saved selections.
func TurnStateKey(turn string) (string, error) {
	if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	return "state." + turn, nil
}

// TurnCallsFilter matches the call records of one turn.
func TurnCallsFilter(turn string) (string, error) {
	if err := ValidateID("turn", turn); err != nil {
		return "", err
	}
	return "calls." + turn + ".*", nil
}

// TurnBuckets is how many buckets TurnBucket spreads turns over.
const TurnBuckets = 64

// TurnBucket returns the bucket of a turn: the FNV-1a 32-bit hash of the
// turn ID (of NoTurn for a call outside any turn) modulo TurnBuckets, as
// two lowercase hexadecimal digits, "00" to "3f". Publishers in other
// languages compute it the same way; the test holds reference values.
func TurnBucket(turn string) string {
	if turn == "" {
		turn = NoTurn
	}
	h := fnv.New32a()
	h.Write([]byte(turn))
	const digits = "0123456789abcdef"
	b := h.Sum32() % TurnBuckets
	return string([]byte{digits[b>>4], digits[b&0xf]})
}
