package integration

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/pkg/messages"
)

// allEndpoints are the API's endpoints.
var allEndpoints = []string{
	messages.EndpointToolsList, messages.EndpointCallsSubmit, messages.EndpointCallsGet, messages.EndpointCallsCancel,
	messages.EndpointTurnsGet, messages.EndpointToolsActivate, messages.EndpointToolsDiscover, messages.EndpointApprovalsList,
	messages.EndpointApprovalsDecide, messages.EndpointApprovalsAnswer, messages.EndpointToolsEnable, messages.EndpointToolsDisable,
	messages.EndpointCallsSubmitBatch, messages.EndpointCallsResults, messages.EndpointCallsEvents, messages.EndpointCallsList,
	messages.EndpointAuditList, messages.EndpointWorkersList, messages.EndpointToolsRemove, messages.EndpointInfo,
	messages.EndpointStatsCalls,
}

// msgpackStr is s as a MessagePack string of at most 31 bytes.
func msgpackStr(s string) []byte { return append([]byte{0xa0 | byte(len(s))}, s...) }

// hostileBodies are request bodies that promise more than they hold, or
// nest deeper than any message may; each must be refused at once.
func hostileBodies() map[string][]byte {
	deepArgs := append([]byte{0x81}, msgpackStr("arguments")...)
	deepArgs = append(deepArgs, bytes.Repeat([]byte{0x91}, 400_000)...)
	deepArgs = append(deepArgs, 0xc0)
	deepUnknown := append([]byte{0x81}, msgpackStr("zz")...)
	deepUnknown = append(deepUnknown, bytes.Repeat([]byte{0x91}, 400_000)...)
	deepUnknown = append(deepUnknown, 0xc0)
	deepUnknownMap := append([]byte{0x81}, msgpackStr("zz")...)
	deepUnknownMap = append(deepUnknownMap, bytes.Repeat([]byte{0x81, 0xa1, 'k'}, 150_000)...)
	deepUnknownMap = append(deepUnknownMap, 0xc0)
	// A body that names a tool, so that nothing else refuses it: only its
	// depth can (docs/protocol.md: 288 levels in all, known fields or not).
	withTool := func(levels int) []byte {
		b := append([]byte{0x82}, msgpackStr("tool")...)
		b = append(b, msgpackStr("demo-echo")...)
		b = append(b, msgpackStr("zz")...)
		b = append(b, bytes.Repeat([]byte{0x91}, levels)...)
		return append(b, 0xc0)
	}
	jsonDeep := `{"arguments":` + strings.Repeat("[", 400_000) + `}`
	jsonDeepUnknown := `{"zz":` + strings.Repeat("[", 400_000) + `}`
	return map[string][]byte{
		"a string promising 4 GiB":                             {0x81, 0xa4, 't', 'o', 'o', 'l', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		"a map promising 4 billion keys":                       {0xdf, 0xff, 0xff, 0xff, 0xff},
		"an array promising 2 billion":                         {0xdd, 0x7f, 0xff, 0xff, 0xff, 0x00},
		"bytes promising 4 GiB":                                {0x81, 0xa4, 't', 'o', 'o', 'l', 0xc6, 0xff, 0xff, 0xff, 0xff, 0x00},
		"an extension promising 4 GiB":                         {0x81, 0xa4, 't', 'o', 'o', 'l', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00},
		"arguments nested 400,000 deep":                        deepArgs,
		"an unknown field nested deep":                         deepUnknown,
		"an unknown field of nested maps":                      deepUnknownMap,
		"JSON arguments nested deep":                           []byte(jsonDeep),
		"a JSON unknown field nested deep":                     []byte(jsonDeepUnknown),
		"a tool and an unknown field nested 289 levels in all": withTool(288),
		"a tool and an unknown field nested 10,000 levels":     withTool(10_000),
		"a tool and an unknown field nested 100,000 levels":    withTool(100_000),
	}
}

// TestHostileRequestsAreCheapAtEveryEndpoint: on the deploy
// configuration, agent A's user sends every endpoint of the API bodies
// that promise more than they hold (lengths of 4 GiB, counts of billions)
// or nest maps and arrays 400,000 levels deep, in a field the endpoint
// reads or one it does not know, in MessagePack and in JSON. Each is
// refused with bad_request or malformed, and the coordinator's memory,
// heap and goroutine stacks, is as large afterwards as before, give or
// take a few MiB (a decoder that recursed into a deep field it skips kept
// 65 MiB of stack).
func TestHostileRequestsAreCheapAtEveryEndpoint(t *testing.T) {
	// Not parallel: the memory measured is the whole test process's, and
	// the parallel tests run only once the others are done. The two kinds
	// of installation take turns.
	for _, kind := range []deployKind{passwords, signed} {
		t.Run(string(kind), func(t *testing.T) { testHostileRequestsAreCheap(t, kind) })
	}
}

func testHostileRequestsAreCheap(t *testing.T, kind deployKind) {
	as := identityDeployOf(t, kind).connector(t)
	nc := as("agent_a")
	send := func(endpoint string, body []byte) string {
		msg := nats.NewMsg(names.Prefix() + ".api." + endpoint)
		if body[0] == '{' {
			msg.Header = nats.Header(messages.JSONCodec.NewHeader())
		}
		msg.Data = body
		reply, err := nc.RequestMsg(msg, testenv.Patience)
		if err != nil {
			t.Fatalf("%s: %v", endpoint, err)
		}
		return reply.Header.Get("Nats-Service-Error-Code")
	}
	// One round first, so that what every request needs once (pools,
	// goroutines) is there before the measure.
	for _, endpoint := range allEndpoints {
		send(endpoint, []byte{0x80})
	}
	// 288 levels in all are allowed: the refusals below are for depth.
	atLimit := append([]byte{0x82}, msgpackStr("tool")...)
	atLimit = append(atLimit, msgpackStr("demo-echo")...)
	atLimit = append(atLimit, msgpackStr("zz")...)
	atLimit = append(atLimit, bytes.Repeat([]byte{0x91}, 287)...)
	atLimit = append(atLimit, 0xc0)
	if code := send(messages.EndpointCallsSubmit, atLimit); code == messages.CodeBadRequest.StatusText() {
		t.Errorf("a submit nesting 288 levels in all was refused as a bad request")
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for name, body := range hostileBodies() {
		for _, endpoint := range allEndpoints {
			if code := send(endpoint, body); code != messages.CodeBadRequest.StatusText() {
				t.Errorf("%s sent to %s: answered %q, want %s", name, endpoint, code, messages.CodeBadRequest.StatusText())
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 16<<20 {
		t.Errorf("the hostile requests left the heap %d MiB larger", grown>>20)
	}
	if grown := int64(after.StackInuse) - int64(before.StackInuse); grown > 8<<20 {
		t.Errorf("the hostile requests left the goroutine stacks %d MiB larger", grown>>20)
	}
}
