package messages

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseToolName(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in      string
		ns, m   string
		wantErr bool
	}{
		{in: "demo-echo", ns: "demo", m: "echo"},
		{in: "demo:echo", ns: "demo", m: "echo"},
		{in: "demo/echo", ns: "demo", m: "echo"},
		{in: "demo.echo", ns: "demo", m: "echo"},
		{in: "system/os:getenv", ns: "system_os", m: "getenv"},
		{in: "a/b/c", ns: "a_b", m: "c"},
		{in: "analyst-Save-Decision", ns: "analyst", m: "Save-Decision"},
		{in: "analyst:Save-Decision", ns: "analyst", m: "Save-Decision"},
		{in: "echo", wantErr: true},
		{in: "demo-", wantErr: true},
		{in: "-echo", wantErr: true},
		{in: "demo-ec ho", wantErr: true},
		{in: "demo-ec*ho", wantErr: true},
		{in: "demo-ec>ho", wantErr: true},
		{in: "de*mo-echo", wantErr: true},
		{in: "demo:echo.x", wantErr: true},
		{in: "demo-" + strings.Repeat("x", 60), wantErr: true},
	}
	for _, tc := range cases {
		got, err := ParseToolName(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseToolName(%q) = %v, want an error", tc.in, got)
			} else if !errors.Is(err, ErrInvalidName) || CodeOf(err) != CodeInvalidName {
				t.Errorf("ParseToolName(%q) error %v does not carry code invalid_name", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseToolName(%q): %v", tc.in, err)
			continue
		}
		if got.Namespace != tc.ns || got.Method != tc.m {
			t.Errorf("ParseToolName(%q) = %q/%q, want %q/%q", tc.in, got.Namespace, got.Method, tc.ns, tc.m)
		}
		if again, err := ParseToolName(got.String()); err != nil || again != got {
			t.Errorf("canonical form %q does not parse back: %v %v", got.String(), again, err)
		}
	}
}

func TestSubjectsRejectUnsafeTokens(t *testing.T) {
	t.Parallel()
	n := MustNames("")
	if _, err := n.CallSubject(ToolName{Namespace: "demo", Method: "a.b"}); err == nil {
		t.Error("a method with a dot made a subject")
	}
	if _, err := n.CallSubject(ToolName{Namespace: "de*", Method: "x"}); err == nil {
		t.Error("a namespace with a wildcard made a subject")
	}
	if _, err := n.Events().Subject("21", "abc.def", EventResult, "demo"); err == nil {
		t.Error("a call ID with a dot made a subject")
	}
	if _, err := n.Events().Subject("21", "abc", EventKind("bogus"), "demo"); err == nil {
		t.Error("an unknown event kind made a subject")
	}
	if _, err := NewNames("Tool.bus"); err == nil {
		t.Error("a prefix with a dot was accepted")
	}
	got, err := n.CallSubject(ToolName{Namespace: "demo", Method: "word_count"})
	if err != nil || got != "toolbus.call.demo.word_count" {
		t.Errorf("CallSubject = %q, %v", got, err)
	}
	if _, err := n.Events().Subject("21", "abc", EventResult, "de.mo"); err == nil {
		t.Error("a namespace with a dot made a subject")
	}
	for _, bucket := range []string{"", "40", "2A", "*", "0"} {
		if _, err := n.Events().Subject(bucket, "abc", EventResult, "demo"); err == nil {
			t.Errorf("bucket %q made a subject", bucket)
		}
	}
	if _, err := n.Events().Subject("21", "abc", EventQueued, "demo"); err == nil {
		t.Error("Events().Subject made a queued event's subject without its turn")
	}
	if got, _ := n.Events().Subject("0c", "c1", EventProgress, "demo"); got != "toolbus.events.0c.c1.progress.demo" {
		t.Errorf("Events().Subject = %q", got)
	}
	if n.Events().Bucket("toolbus.events.0c.c1.progress.demo") != "0c" || n.Events().Bucket("toolbus.events.c1.progress.demo") != "" {
		t.Error("Events().Bucket misread a subject")
	}
	if id, kind, ns, ok := n.Events().Parse("toolbus.events.0c.c1.progress.demo"); !ok || id != "c1" || kind != EventProgress || ns != "demo" {
		t.Errorf("Events().Parse = %q %q %q %v", id, kind, ns, ok)
	}
	if _, _, _, ok := n.Events().Parse("toolbus.events.c1.progress.demo"); ok {
		t.Error("an unbucketed event subject was parsed")
	}
	if n.CallsStream() != "TOOLBUS_CALLS" || n.EventsStream() != "TOOLBUS_EVENTS" {
		t.Errorf("streams %s %s", n.CallsStream(), n.EventsStream())
	}
}

func TestIdempotentCallID(t *testing.T) {
	t.Parallel()
	a := IdempotentCallID("agent", "k1")
	if a != IdempotentCallID("agent", "k1") {
		t.Fatal("not deterministic")
	}
	if a == IdempotentCallID("agent2", "k1") || a == IdempotentCallID("agent", "k2") {
		t.Fatal("different agents or keys share an ID")
	}
	if err := ValidateID("call ID", a); err != nil {
		t.Fatal(err)
	}
}

func TestEventKindFilter(t *testing.T) {
	t.Parallel()
	got, err := MustNames("tb2").Filters().EventKind(EventResult)
	if err != nil || got != "tb2.events.*.*.result.*" {
		t.Fatalf("Filters().EventKind(result) = %q, %v", got, err)
	}
	if _, err := MustNames("").Filters().EventKind("res.*"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("Filters().EventKind of an unknown kind: %v", err)
	}
}

func TestRoutedResultSubjects(t *testing.T) {
	t.Parallel()
	n := MustNames("")
	route := "R0123456789abcdefghijk"
	id := RoutedCallID(route, "S0123456789abcdefghijk")
	got, err := n.Routes().ResultSubject(id, "demo")
	if err != nil || got != "toolbus.results."+route+".S0123456789abcdefghijk.demo" {
		t.Fatalf("Routes().ResultSubject = %q, %v", got, err)
	}
	if sub, _ := n.Routes().Subject(route); sub != "toolbus.results."+route+".>" {
		t.Errorf("Routes().Subject = %q", sub)
	}
	if callID, ns, ok := n.Routes().ParseSubject(route, got); !ok || callID != id || ns != "demo" {
		t.Errorf("Routes().ParseSubject(result) = %q %q %v", callID, ns, ok)
	}
	answer, _ := n.Routes().CallSubject(id)
	if callID, ns, ok := n.Routes().ParseSubject(route, answer); !ok || callID != id || ns != "" {
		t.Errorf("Routes().ParseSubject(answer) = %q %q %v", callID, ns, ok)
	}
	if n.Routes().RepublishFrom() != "toolbus.events.*.*.result.*" || n.Routes().RepublishTo() != "toolbus.results.{{SplitFromLeft(2,22)}}.{{Wildcard(3)}}" {
		t.Errorf("republish %s -> %s", n.Routes().RepublishFrom(), n.Routes().RepublishTo())
	}
	if ns := n.CallSubjectNamespace("toolbus.call.demo.echo"); ns != "demo" {
		t.Errorf("CallSubjectNamespace = %q", ns)
	}
	if ns := n.CallSubjectNamespace("toolbus.events.demo.echo"); ns != "" {
		t.Errorf("CallSubjectNamespace of an event subject = %q", ns)
	}
	if b, _ := n.NamespaceResultsBucket("demo"); b != "toolbus_results_demo" {
		t.Errorf("NamespaceResultsBucket = %q", b)
	}
}

// Every event a worker, a coordinator or a client reads has its subject
// parsed: the parse allocates nothing.
func TestParsingAnEventSubjectAllocatesNothing(t *testing.T) {
	n := MustNames("")
	subject := "toolbus.events.0c.c1.queued.turn-1.demo"
	if allocs := testing.AllocsPerRun(100, func() { n.Events().Parse(subject) }); allocs != 0 {
		t.Errorf("Events().Parse allocates %.0f times", allocs)
	}
}

// A queued event's subject names its call, its turn and its namespace,
// last; the filters of the namespace's consumer and of the turn's index
// match it, and every reader takes the same call and namespace from it.
func TestQueuedSubjectNamesTheTurn(t *testing.T) {
	n := MustNames("")
	inTurn, err := n.Events().Queued("c1", "turn-1", "demo")
	if err != nil || inTurn != "toolbus.events.0c.c1.queued.turn-1.demo" {
		t.Fatalf("Events().Queued = %q, %v", inTurn, err)
	}
	noTurn, _ := n.Events().Queued("c2", "", "demo")
	if noTurn != "toolbus.events.21.c2.queued.~.demo" {
		t.Fatalf("a call outside any turn: %q", noTurn)
	}
	if _, err := n.Events().Queued("c1", "t.1", "demo"); err == nil {
		t.Error("a turn with a dot was accepted")
	}
	for _, tc := range []struct {
		subject  string
		id, ns   string
		kind     EventKind
		turn     string
		ok, isQd bool
	}{
		{"toolbus.events.0c.c1.queued.turn-1.demo", "c1", "demo", EventQueued, "turn-1", true, true},
		{"toolbus.events.21.c2.queued.~.demo", "c2", "demo", EventQueued, "", true, true},
		{"toolbus.events.0c.c1.result.demo", "c1", "demo", EventResult, "", true, false},
		{"toolbus.events.0c.c1.queued.demo", "", "", "", "", false, false},
		{"toolbus.events.0c.c1.result.turn-1.demo", "", "", "", "", false, false},
		{"toolbus.events.c1.queued.turn-1.demo", "", "", "", "", false, false}, // unbucketed
		{"toolbus.events.c1.result.demo", "", "", "", "", false, false},
		{"toolbus.events.0c.c1.queued.turn-1.demo.extra", "", "", "", "", false, false},
		{"toolbus.events.0c.c1.result.demo.extra.more", "", "", "", "", false, false},
		{"toolbus.events.0c", "", "", "", "", false, false},
	} {
		id, kind, ns, ok := n.Events().Parse(tc.subject)
		if ok != tc.ok || id != tc.id || kind != tc.kind || ns != tc.ns {
			t.Errorf("Events().Parse(%s) = %s %s %s %v", tc.subject, id, kind, ns, ok)
		}
		if turn, ok := n.Events().Turn(tc.subject); ok != tc.isQd || turn != tc.turn {
			t.Errorf("Events().Turn(%s) = %q %v", tc.subject, turn, ok)
		}
	}
	ns, _ := n.Filters().NamespaceQueue("demo")
	turn, _ := n.Filters().TurnQueue("turn-1")
	kind, _ := n.Filters().EventKind(EventQueued)
	call, _ := n.Filters().CallKind("c1", EventQueued)
	own, _ := n.Filters().Event("0c", "c1", EventQueued, "demo")
	results, _ := n.Filters().CallResult("0c", "c1", "demo")
	queued, _ := n.Filters().CallQueued("0c", "c1")
	events, _ := n.Filters().CallEvents("c1")
	if ns != "toolbus.events.*.*.queued.*.demo" || turn != "toolbus.events.0c.*.queued.turn-1.*" || kind != "toolbus.events.*.*.queued.*.*" ||
		call != "toolbus.events.*.c1.queued.*.*" || own != "toolbus.events.0c.c1.queued.*.demo" ||
		results != "toolbus.events.0c.c1.result.demo" || queued != "toolbus.events.0c.c1.queued.*.*" || events != "toolbus.events.*.c1.>" {
		t.Errorf("filters: %s %s %s %s %s %s %s %s", ns, turn, kind, call, own, results, queued, events)
	}
	if got := n.QueuedEventFilter(inTurn); got != queued {
		t.Errorf("QueuedEventFilter(%s) = %q, want %q", inTurn, got, queued)
	}
	for _, notQueued := range []string{results, "toolbus.events", "other.events.0c.c1.queued.~.demo", ""} {
		if got := n.QueuedEventFilter(notQueued); got != "" {
			t.Errorf("QueuedEventFilter(%s) = %q, want none", notQueued, got)
		}
	}
	if result, _ := n.Filters().EventKind(EventResult); result != "toolbus.events.*.*.result.*" {
		t.Errorf("results filter %s", result)
	}
}

// TestTurnBucket pins the bucket function to reference values computed
// apart from Go's hash/fnv (FNV-1a 32: offset basis 0x811c9dc5, prime
// 0x01000193), so that publishers in other languages can check theirs.
func TestTurnBucket(t *testing.T) {
	t.Parallel()
	for turn, want := range map[string]string{
		"":                           "21", // no turn: the bucket of "~"
		NoTurn:                       "21", // FNV-1a 32 0xfb0c4d61
		"turn-1":                     "0c", // 0x18046e8c
		"t1":                         "16", // 0x0844ecd6
		"01JDZ7Q5W4X3V2T1R0PQNMKJHG": "18", // 0xf14f15d8
	} {
		if got := TurnBucket(turn); got != want {
			t.Errorf("TurnBucket(%q) = %q, want %q", turn, got, want)
		}
	}
	seen := make(map[string]bool)
	for i := range 4096 {
		b := TurnBucket(fmt.Sprintf("turn-%d", i))
		if len(b) != 2 || strings.Trim(b, "0123456789abcdef") != "" || b > "3f" {
			t.Fatalf("TurnBucket(turn-%d) = %q, not two lowercase hex digits from 00 to 3f", i, b)
		}
		seen[b] = true
	}
	if len(seen) != TurnBuckets {
		t.Errorf("4096 turns fell in %d buckets, want all %d", len(seen), TurnBuckets)
	}
}

// The role types that Names returns name what Names named before they
// came, under the installation's own prefix: the subjects and resources
// on the wire did not change with the Go API.
func TestRoleNamesKeepTheWire(t *testing.T) {
	t.Parallel()
	n := MustNames("tb2")
	route := "R0123456789abcdefghijk"
	id := RoutedCallID(route, "S0123456789abcdefghijk")
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	routedCall, routedOK := n.Routes().ParseCallSubject("tb2.results." + id[:RouteLength] + "." + id[RouteLength:])
	if !routedOK || routedCall != id {
		t.Errorf("Routes().ParseCallSubject = %q %v", routedCall, routedOK)
	}
	for _, tc := range []struct{ what, got, want string }{
		{"Filters().NamespaceCalls", must(n.Filters().NamespaceCalls("demo")), "tb2.call.demo.>"},
		{"Filters().CallNamespaceEvents", must(n.Filters().CallNamespaceEvents("0c", "c1", "demo")), "tb2.events.0c.c1.*.demo"},
		{"Filters().Event", must(n.Filters().Event("0c", "c1", EventResult, "demo")), "tb2.events.0c.c1.result.demo"},
		{"Filters().Cancel", must(n.Filters().Cancel("demo")), "tb2.cancel.demo.*"},
		{"Events().Subject", must(n.Events().Subject("0c", "c1", EventStarted, "demo")), "tb2.events.0c.c1.started.demo"},
		{"Events().Bucket", n.Events().Bucket("tb2.events.0c.c1.started.demo"), "0c"},
		{"Events().Namespace", n.Events().Namespace("tb2.events.0c.c1.started.demo"), "demo"},
		{"Events().Namespace of another prefix", n.Events().Namespace("toolbus.events.0c.c1.started.demo"), ""},
		{"Routes().CallSubject", must(n.Routes().CallSubject(id)), "tb2.results." + route + ".S0123456789abcdefghijk"},
		{"Routes().Subject", must(n.Routes().Subject(route)), "tb2.results." + route + ".>"},
		{"Routes().RepublishFrom", n.Routes().RepublishFrom(), "tb2.events.*.*.result.*"},
		{"Routes().RepublishTo", n.Routes().RepublishTo(), "tb2.results.{{SplitFromLeft(2,22)}}.{{Wildcard(3)}}"},
		{"Consumers().Durable", must(n.Consumers().Durable("demo")), "ns_demo"},
		{"Consumers().RequestSubject", must(n.Consumers().RequestSubject("demo")), "tb2.consumers.demo"},
		{"Consumers().RequestFilter", n.Consumers().RequestFilter(), "tb2.consumers.*"},
		{"Consumers().RequestNamespace", n.Consumers().RequestNamespace("tb2.consumers.demo"), "demo"},
		{"Consumers().RequestNamespace of a bad namespace", n.Consumers().RequestNamespace("tb2.consumers.de.mo"), ""},
		{"Audit().Stream", n.Audit().Stream(), "TB2_AUDIT"},
		{"Audit().Subject", must(n.Audit().Subject("deny")), "tb2.audit.deny"},
		{"Audit().Subjects", n.Audit().Subjects(), "tb2.audit.>"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.what, tc.got, tc.want)
		}
	}
	if _, err := n.Consumers().Durable("de.mo"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Consumers().Durable of a namespace with a dot: %v", err)
	}
	if _, err := n.Audit().Subject("de*ny"); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Audit().Subject of a decision with a wildcard: %v", err)
	}
}
