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
	if _, err := n.EventSubject("21", "abc.def", EventResult, "demo"); err == nil {
		t.Error("a call ID with a dot made a subject")
	}
	if _, err := n.EventSubject("21", "abc", EventKind("bogus"), "demo"); err == nil {
		t.Error("an unknown event kind made a subject")
	}
	if _, err := NewNames("Tool.bus"); err == nil {
		t.Error("a prefix with a dot was accepted")
	}
	got, err := n.CallSubject(ToolName{Namespace: "demo", Method: "word_count"})
	if err != nil || got != "toolbus.call.demo.word_count" {
		t.Errorf("CallSubject = %q, %v", got, err)
	}
	if _, err := n.EventSubject("21", "abc", EventResult, "de.mo"); err == nil {
		t.Error("a namespace with a dot made a subject")
	}
	for _, bucket := range []string{"", "40", "2A", "*", "0"} {
		if _, err := n.EventSubject(bucket, "abc", EventResult, "demo"); err == nil {
			t.Errorf("bucket %q made a subject", bucket)
		}
	}
	if _, err := n.EventSubject("21", "abc", EventQueued, "demo"); err == nil {
		t.Error("EventSubject made a queued event's subject without its turn")
	}
	if got, _ := n.EventSubject("0c", "c1", EventProgress, "demo"); got != "toolbus.events.0c.c1.progress.demo" {
		t.Errorf("EventSubject = %q", got)
	}
	if n.EventBucket("toolbus.events.0c.c1.progress.demo") != "0c" || n.EventBucket("toolbus.events.c1.progress.demo") != "" {
		t.Error("EventBucket misread a subject")
	}
	if id, kind, ns, ok := n.ParseEventSubject("toolbus.events.0c.c1.progress.demo"); !ok || id != "c1" || kind != EventProgress || ns != "demo" {
		t.Errorf("ParseEventSubject = %q %q %q %v", id, kind, ns, ok)
	}
	if _, _, _, ok := n.ParseEventSubject("toolbus.events.c1.progress.demo"); ok {
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
	got, err := MustNames("tb2").EventKindFilter(EventResult)
	if err != nil || got != "tb2.events.*.*.result.*" {
		t.Fatalf("EventKindFilter(result) = %q, %v", got, err)
	}
	if _, err := MustNames("").EventKindFilter("res.*"); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("EventKindFilter of an unknown kind: %v", err)
	}
}

func TestRoutedResultSubjects(t *testing.T) {
	t.Parallel()
	n := MustNames("")
	route := "R0123456789abcdefghijk"
	id := RoutedCallID(route, "S0123456789abcdefghijk")
	got, err := n.RoutedResultSubject(id, "demo")
	if err != nil || got != "toolbus.results."+route+".S0123456789abcdefghijk.demo" {
		t.Fatalf("RoutedResultSubject = %q, %v", got, err)
	}
	if sub, _ := n.RouteSubject(route); sub != "toolbus.results."+route+".>" {
		t.Errorf("RouteSubject = %q", sub)
	}
	if callID, ns, ok := n.ParseRouteSubject(route, got); !ok || callID != id || ns != "demo" {
		t.Errorf("ParseRouteSubject(result) = %q %q %v", callID, ns, ok)
	}
	answer, _ := n.CallRouteSubject(id)
	if callID, ns, ok := n.ParseRouteSubject(route, answer); !ok || callID != id || ns != "" {
		t.Errorf("ParseRouteSubject(answer) = %q %q %v", callID, ns, ok)
	}
	if n.RepublishSource() != "toolbus.events.*.*.result.*" || n.RepublishDestination() != "toolbus.results.{{SplitFromLeft(2,22)}}.{{Wildcard(3)}}" {
		t.Errorf("republish %s -> %s", n.RepublishSource(), n.RepublishDestination())
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

// A queued event's subject names its call, its turn and its namespace,
// last; the filters of the namespace's consumer and of the turn's index
// match it, and every reader takes the same call and namespace from it.
func TestQueuedSubjectNamesTheTurn(t *testing.T) {
	n := MustNames("")
	inTurn, err := n.QueuedSubject("c1", "turn-1", "demo")
	if err != nil || inTurn != "toolbus.events.0c.c1.queued.turn-1.demo" {
		t.Fatalf("QueuedSubject = %q, %v", inTurn, err)
	}
	noTurn, _ := n.QueuedSubject("c2", "", "demo")
	if noTurn != "toolbus.events.21.c2.queued.~.demo" {
		t.Fatalf("a call outside any turn: %q", noTurn)
	}
	if _, err := n.QueuedSubject("c1", "t.1", "demo"); err == nil {
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
	} {
		id, kind, ns, ok := n.ParseEventSubject(tc.subject)
		if ok != tc.ok || id != tc.id || kind != tc.kind || ns != tc.ns {
			t.Errorf("ParseEventSubject(%s) = %s %s %s %v", tc.subject, id, kind, ns, ok)
		}
		if turn, ok := n.QueuedTurn(tc.subject); ok != tc.isQd || turn != tc.turn {
			t.Errorf("QueuedTurn(%s) = %q %v", tc.subject, turn, ok)
		}
	}
	ns, _ := n.NamespaceQueueFilter("demo")
	turn, _ := n.TurnQueueFilter("turn-1")
	kind, _ := n.EventKindFilter(EventQueued)
	call, _ := n.CallKindFilter("c1", EventQueued)
	own, _ := n.EventFilter("0c", "c1", EventQueued, "demo")
	results, _ := n.CallResultFilter("0c", "c1", "demo")
	queued, _ := n.CallQueuedFilter("0c", "c1")
	events, _ := n.CallEventsFilter("c1")
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
	if result, _ := n.EventKindFilter(EventResult); result != "toolbus.events.*.*.result.*" {
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
