package messages

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The discover reply, the tool entries it carries and their parts are
// generated too: each plain* type has their fields but not their
// methods, so the library writes and reads it by reflection.
type (
	plainDiscoverReply DiscoverReply
	plainDiscoverHit   DiscoverHit
	plainToolEntry     ToolEntry
	plainToolMetadata  ToolMetadata
	plainToolSource    ToolSource
	plainToolExposure  ToolExposure
)

func fullToolEntry() ToolEntry {
	yes := true
	return ToolEntry{
		ToolDefinition: ToolDefinition{Name: "fs-read_file", Namespace: "fs", Method: "read_file", OriginalName: "read_file", Title: "Read — a file ✓",
			Description: "Reads a file.", InputSchema: JSON(`{"type":"object","properties":{"path":{"type":"string"}}}`), OutputSchema: JSON(`{"type":"string"}`),
			Metadata: ToolMetadata{Tags: []string{"fs", "read"}, TimeoutMS: 30000, MaxResultSize: 1 << 20, SearchHint: "open", ConcurrencySafe: true, ThinkAugment: &yes, Extra: map[string]string{"owner": "team"}},
			Source:   ToolSource{Kind: "mcp", Name: "files"}, Delivery: DeliveryAtMostOnce},
		Available: true, Unavailable: "u", Disabled: true, Reason: "r",
		Exposure: &ToolExposure{Tier: "base", AlwaysInclude: true, Bundles: []string{"b1", ""}, Approval: "queue", Async: true},
	}
}

func TestGeneratedDiscoverCodecsMatchReflection(t *testing.T) {
	t.Parallel()
	full := fullToolEntry()
	sparse := ToolEntry{ToolDefinition: ToolDefinition{Name: "a-b", Namespace: "a", Method: "b"}}
	no := false
	emptyLists := ToolEntry{ToolDefinition: ToolDefinition{Name: "a-b", Metadata: ToolMetadata{Tags: []string{}, ThinkAugment: &no, Extra: map[string]string{}}}, Exposure: &ToolExposure{Bundles: []string{}}}
	reply := DiscoverReply{Hits: []DiscoverHit{{Name: "fs-read_file", Score: 12.5, Exact: true}, {Name: "a-b", Score: 0.25}}, Tools: []ToolEntry{full, sparse},
		Schemas: []JSON{JSON(`{"type":"function"}`), nil}, Page: 3, More: true}
	cases := []struct {
		name          string
		fast, reflect any
	}{
		{"full entry", full, plainToolEntry(full)},
		{"sparse entry", sparse, plainToolEntry(sparse)},
		{"entry with empty lists", emptyLists, plainToolEntry(emptyLists)},
		{"metadata", full.Metadata, plainToolMetadata(full.Metadata)},
		{"empty metadata", ToolMetadata{}, plainToolMetadata{}},
		{"source", full.Source, plainToolSource(full.Source)},
		{"exposure", *full.Exposure, plainToolExposure(*full.Exposure)},
		{"hit", reply.Hits[0], plainDiscoverHit(reply.Hits[0])},
		{"reply", reply, plainDiscoverReply(reply)},
		{"empty reply", DiscoverReply{Hits: []DiscoverHit{}, Tools: []ToolEntry{}}, plainDiscoverReply{Hits: []DiscoverHit{}, Tools: []ToolEntry{}}},
		{"nil reply", DiscoverReply{}, plainDiscoverReply{}},
	}
	for _, tc := range cases {
		// Byte for byte: every map here has at most one key whose order
		// the library could choose.
		got, err := Msgpack.Marshal(tc.fast)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, err := Msgpack.Marshal(tc.reflect)
		if err != nil {
			t.Fatalf("%s (reflection): %v", tc.name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %x\nwant %x", tc.name, got, want)
		}
		// And read back by the generated decoder as reflection reads it.
		fast := reflect.New(reflect.TypeOf(tc.fast)).Interface()
		slow := reflect.New(reflect.TypeOf(tc.reflect)).Interface()
		if err := Msgpack.Unmarshal(want, fast); err != nil {
			t.Fatalf("%s: decode: %v", tc.name, err)
		}
		if err := Msgpack.Unmarshal(want, slow); err != nil {
			t.Fatalf("%s: decode (reflection): %v", tc.name, err)
		}
		if !reflect.DeepEqual(reflect.ValueOf(fast).Elem().Convert(reflect.TypeOf(tc.reflect)).Interface(), reflect.ValueOf(slow).Elem().Interface()) {
			a, _ := json.Marshal(fast)
			b, _ := json.Marshal(slow)
			t.Errorf("%s: decoded\n got %s\nwant %s", tc.name, a, b)
		}
	}
	// Every field of the entry is set in the full value: a new one needs a
	// value here (and go generate).
	m := asMap(t, full)
	if n := countFields(reflect.TypeFor[ToolEntry]()); len(m) != n {
		t.Errorf("ToolEntry: %d of %d fields covered", len(m), n)
	}
	if md := asMap(t, full.Metadata); len(md) != reflect.TypeFor[ToolMetadata]().NumField() {
		t.Errorf("ToolMetadata: %d of %d fields covered", len(md), reflect.TypeFor[ToolMetadata]().NumField())
	}
	if ex := asMap(t, *full.Exposure); len(ex) != reflect.TypeFor[ToolExposure]().NumField() {
		t.Errorf("ToolExposure: %d of %d fields covered", len(ex), reflect.TypeFor[ToolExposure]().NumField())
	}
}

// countFields counts a struct's fields with those of its embedded structs inlined.
func countFields(typ reflect.Type) int {
	n := 0
	for f := range typ.Fields() {
		if f.Anonymous {
			n += countFields(f.Type)
			continue
		}
		n++
	}
	return n
}

// What other programs may write: a nil list, integers of other widths, an
// unknown key; and a list of the wrong kind named by its field.
func TestDiscoverDecodersReadOtherWriters(t *testing.T) {
	t.Parallel()
	in := map[string]any{"hits": nil, "page": uint64(2), "more": true, "future": []any{1},
		"tools": []any{map[string]any{"name": "a-b", "metadata": map[string]any{"tags": nil, "timeout_ms": int8(5), "think_augment": nil, "extra": map[string]any{"k": "v"}}, "source": nil,
			"exposure": map[string]any{"bundles": []any{"x"}}, "available": true}}}
	data, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var fast DiscoverReply
	var slow plainDiscoverReply
	if err := Msgpack.Unmarshal(data, &fast); err != nil {
		t.Fatal(err)
	}
	if err := Msgpack.Unmarshal(data, &slow); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plainDiscoverReply(fast), slow) {
		t.Errorf("got %+v\nwant %+v", fast, slow)
	}
	bad, _ := msgpack.Marshal(map[string]any{"tools": []any{map[string]any{"metadata": map[string]any{"tags": "not a list"}}}})
	err = Msgpack.Unmarshal(bad, &fast)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("tags")) {
		t.Errorf("a tags field that is not a list: %v, want an error naming tags", err)
	}
}

// benchDiscoverReply is a page of ten hits with their definitions, as
// tools.discover answers.
func benchDiscoverReply() DiscoverReply {
	var r DiscoverReply
	for i := range 10 {
		e := fullToolEntry()
		e.Name = e.Name + string(rune('a'+i))
		r.Hits = append(r.Hits, DiscoverHit{Name: e.Name, Score: float64(10 - i)})
		r.Tools = append(r.Tools, e)
	}
	return r
}

// The generated codec against the library's reflection, on the same page.
func BenchmarkDiscoverReply(b *testing.B) {
	reply := benchDiscoverReply()
	plain := plainDiscoverReply(reply)
	data, err := Msgpack.Marshal(&reply)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode/generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Msgpack.Marshal(&reply); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode/reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Msgpack.Marshal(&plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r DiscoverReply
			if err := Msgpack.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r plainDiscoverReply
			if err := Msgpack.Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
