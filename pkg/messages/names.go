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
		return &NameError{Kind: "notify subject", Value: subject, Reason: `must be a subject under "_INBOX." without wildcards, of at most 256 characters`}
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

// Names builds every subject and resource name of one Toolbus installation:
// its streams, buckets and API subjects itself, the names of one role each
// through the small value types it returns (Events, Filters, Routes,
// Consumers, Audit). The zero value is not usable; get one from NewNames.
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

// Filters returns the subject filters by which consumers, direct gets and
// subscriptions pick a call's, a turn's or a namespace's messages.
func (n Names) Filters() FilterNames { return FilterNames{prefix: n.prefix} }

// Events returns the subjects a call's events are stored under, and reads
// them back.
func (n Names) Events() EventNames { return EventNames{prefix: n.prefix} }

// Routes returns the subjects of routed results.
func (n Names) Routes() RouteNames { return RouteNames{prefix: n.prefix} }

// Consumers returns the names of the namespaces' consumers and of the
// subjects on which workers ask for them.
func (n Names) Consumers() ConsumerNames { return ConsumerNames{prefix: n.prefix} }

// Audit returns the names of the audit stream of policy decisions.
func (n Names) Audit() AuditNames { return AuditNames(n) }

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

// BucketChanges is where the stream of a key-value bucket of the
// installation republishes the headers of the messages it stores under
// the keys matching keys (a subject filter of keys, ">" for all):
// <prefix>.kv.<bucket>.<keys>. A service that may not create consumers
// follows the bucket by reading it after each.
func (n Names) BucketChanges(bucket, keys string) string {
	return n.prefix + ".kv." + bucket + "." + keys
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

// AuditNames are the names of the audit stream, which records the
// policy's decisions. Get them from Names.Audit.
type AuditNames struct {
	prefix string
	upper  string
}

// Stream is the stream of policy decisions.
func (n AuditNames) Stream() string { return n.upper + "_AUDIT" }

// Subject is where decisions of one kind are recorded.
func (n AuditNames) Subject(decision string) (string, error) {
	if err := ValidateID("audit decision", decision); err != nil {
		return "", err
	}
	return n.prefix + ".audit." + decision, nil
}

// Subjects is the subject space of Stream.
func (n AuditNames) Subjects() string { return n.prefix + ".audit.>" }

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

// QueuedEventFilter is Filters().CallQueued of the call whose queued event is
// stored under subject (Events().Queued, which checked the names in it):
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
