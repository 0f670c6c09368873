package messages

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// TestUnsetTimesAreLeftOutInBothEncodings: a time not known yet (a call
// not started) is absent from JSON as from MessagePack, never the zero
// time "0001-01-01T00:00:00Z".
func TestUnsetTimesAreLeftOutInBothEncodings(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, v := range []any{
		&CallInfo{CallID: "c1", Tool: "t-echo", State: StateQueued},
		&CallResult{CallID: "c1", Tool: "t-echo", Status: StateFailed, QueuedAt: now, FinishedAt: now},
		&TurnInfo{Turn: "t1", Calls: []CallInfo{{CallID: "c1", Tool: "t-echo", State: StateQueued, QueuedAt: now}}},
	} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "0001-01-01") || strings.Contains(string(data), "started_at") {
			t.Errorf("JSON of %T: %s", v, data)
		}
		packed, err := Msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := msgpack.Unmarshal(packed, &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["started_at"]; ok {
			t.Errorf("MessagePack of %T has started_at: %v", v, m)
		}
	}
	// A time that is set is in both.
	data, _ := json.Marshal(&CallInfo{CallID: "c1", StartedAt: now})
	if !strings.Contains(string(data), `"started_at":"2026-11-29T12:00:00Z"`) {
		t.Errorf("JSON without its start: %s", data)
	}
}

// A message the msgpack library decodes refuses a time that JSON cannot
// hold, wherever it is in the message, as the generated decoders do.
func TestReflectionDecodedTimesInRange(t *testing.T) {
	t.Parallel()
	farFuture := binary.BigEndian.AppendUint64([]byte{0xc7, 12, 0xff, 0, 0, 0, 0}, 1<<40) // year 36812
	approval := rawMap("approval_id", []byte{0xa1, 'a'}, "expires_at", farFuture)
	batch := rawMap("calls", append([]byte{0x91}, rawMap("call_id", []byte{0xa1, 'c'}, "approval", approval)...))
	var reply SubmitBatchReply
	if err := Msgpack.Unmarshal(batch, &reply); CodeOf(err) != CodeMalformed || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("approval of a batch call in year 36812: %v", err)
	}
	inRange := rawMap("calls", append([]byte{0x91}, rawMap("call_id", []byte{0xa1, 'c'}, "approval", rawMap("approval_id", []byte{0xa1, 'a'}))...))
	var fresh SubmitBatchReply
	if err := Msgpack.Unmarshal(inRange, &fresh); err != nil || fresh.Calls[0].Approval == nil {
		t.Errorf("approval without times: %+v (%v)", fresh, err)
	}
}
