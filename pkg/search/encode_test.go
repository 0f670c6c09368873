package search

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/dev/synthetic"
)

func TestEncodeRoundTrip(t *testing.T) {
	defs := append(testCatalog(), cachedCatalog(1000)...)
	defs[0].OriginalName = "GitHub.CreateIssue"
	defs[1].Metadata.SearchHint = "bug tracker tickets"
	cfg := DefaultConfig()
	cfg.K1 = 1.1
	cfg.Fields[FieldTag].B = 0.2
	ix, err := Build(cfg, defs)
	if err != nil {
		t.Fatal(err)
	}
	data := ix.Encode()
	decoded, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if decoded.Config() != cfg {
		t.Errorf("decoded config %+v; want %+v", decoded.Config(), cfg)
	}
	if again := decoded.Encode(); !bytes.Equal(again, data) {
		t.Errorf("encoding the decoded index gives %d other bytes", len(again))
	}
	queries := append(synthetic.Queries(defs, 200), "github.createissue", "gitHub-create_issue", "bug tracker", "")
	for _, q := range queries {
		for _, query := range []Query{{Text: q}, {Text: q, Tags: []string{"read_only"}, Page: 1}} {
			want := search(t, ix, query)
			if got := search(t, decoded, query); !sameResult(got, want) {
				t.Fatalf("decoded index answers %q with\n%+v\nwant\n%+v", q, got, want)
			}
		}
	}
	// A decoded index takes updates like a built one.
	if err := decoded.Upsert(tool("late", "arrival", "Arrives after decoding.", nil)); err != nil {
		t.Fatal(err)
	}
	if hits := search(t, decoded, Query{Text: "arrives after decoding"}).Hits; len(hits) == 0 || hits[0].Tool.String() != "late-arrival" {
		t.Errorf("tool upserted into a decoded index not found: %v", names(hits))
	}
}

func TestEncodeEmpty(t *testing.T) {
	ix := mustBuild(t, nil)
	decoded, err := Decode(ix.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if decoded.Len() != 0 {
		t.Errorf("Len = %d", decoded.Len())
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := mustBuild(t, testCatalog()).Encode()
	header := []byte(encodingMagic)
	header = binary.AppendUvarint(header, formatVersion)
	header = binary.AppendUvarint(header, analyzerVersion)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "missing"},
		{"other magic", []byte("JUNKJUNK"), "missing"},
		{"future format", binary.AppendUvarint([]byte(encodingMagic), formatVersion+1), "format version"},
		{"other analyzer", binary.AppendUvarint(binary.AppendUvarint([]byte(encodingMagic), formatVersion), analyzerVersion+1), "analyzer version"},
		{"truncated config", binary.AppendUvarint(bytes.Clone(header), NumFields), "truncated"},
		{"truncated", valid[:len(valid)-3], ""},
		{"trailing bytes", append(bytes.Clone(valid), 0), "follow the index"},
		{"huge count", append(bytes.Clone(valid[:len(header)+1+8*(2+2*NumFields)]), 0xff, 0xff, 0xff, 0xff, 0x0f), "exceeds"},
		// No namespaces, no tags, one tool whose namespace ID is not a varint.
		{"bad namespace ID", append(bytes.Clone(valid[:len(header)+1+8*(2+2*NumFields)]), 0, 0, 1, 0x80, 0x80, 0x80, 0x80), "namespace ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.data)
			if err == nil {
				t.Fatal("Decode succeeded")
			}
			if !errors.Is(err, ErrCorruptIndex) {
				t.Errorf("error %v does not match ErrCorruptIndex", err)
			}
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Errorf("error %T is not a *DecodeError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestDecodeRejectsEveryTruncation(t *testing.T) {
	valid := mustBuild(t, testCatalog()).Encode()
	for n := 0; n < len(valid); n++ {
		if _, err := Decode(valid[:n]); err == nil {
			t.Fatalf("Decode of the first %d of %d bytes succeeded", n, len(valid))
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(mustBuild(f, testCatalog()).Encode())
	f.Add(mustBuild(f, nil).Encode())
	f.Add(mustBuild(f, cachedCatalog(1000)[:20]).Encode())
	f.Add([]byte(encodingMagic))
	taught := mustBuild(f, gapCatalog())
	learnFrom(f, taught, "media-view_image", 2, "show me a picture")
	learnFrom(f, taught, "pets-listPets", 1, "find pets that are cats")
	f.Add(taught.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorruptIndex) {
				t.Fatalf("error %v does not match ErrCorruptIndex", err)
			}
			return
		}
		// What decodes is canonical and usable.
		if again := ix.Encode(); !bytes.Equal(again, data) {
			t.Fatalf("re-encoding gives other bytes:\n%x\n%x", data, again)
		}
		if _, err := ix.Search(Query{Text: "a b c search file"}); err != nil {
			t.Fatal(err)
		}
	})
}
