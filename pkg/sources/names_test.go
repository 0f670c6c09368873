package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func hash6(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])[:6]
}

func TestMethods(t *testing.T) {
	long := strings.Repeat("very_long_tool_name_", 5) // 100 characters, all valid
	tests := []struct {
		name      string
		namespace string
		names     []string
		want      map[string]string
	}{
		{
			name:      "valid names are kept",
			namespace: "everything",
			names:     []string{"get-sum", "echo", "get_tiny_image", "_private_"},
			want:      map[string]string{"get-sum": "get-sum", "echo": "echo", "get_tiny_image": "get_tiny_image", "_private_": "_private_"},
		},
		{
			name:      "dots, slashes and spaces",
			namespace: "fs",
			names:     []string{"files.read", "files/read", "search web", "a  . b"},
			want: map[string]string{
				"files.read": "files_read_" + hash6("files.read"),
				"files/read": "files_read_" + hash6("files/read"),
				"search web": "search_web_" + hash6("search web"),
				"a  . b":     "a_b_" + hash6("a  . b"),
			},
		},
		{
			name:      "a renamed tool never takes a valid name",
			namespace: "fs",
			names:     []string{"files_read", "files.read"},
			want:      map[string]string{"files_read": "files_read", "files.read": "files_read_" + hash6("files.read")},
		},
		{
			name:      "nothing usable left",
			namespace: "x",
			names:     []string{"检索", "..."},
			want:      map[string]string{"检索": "tool_" + hash6("检索"), "...": "tool_" + hash6("...")},
		},
		{
			name:      "too long for the namespace",
			namespace: "ns",
			names:     []string{long},
			want:      map[string]string{long: long[:64-3-7] + "_" + hash6(long)},
		},
		{
			name:      "empty namespace assumes the longest",
			namespace: "",
			names:     []string{strings.Repeat("a", 31), strings.Repeat("b", 32)},
			want: map[string]string{
				strings.Repeat("a", 31): strings.Repeat("a", 31),
				strings.Repeat("b", 32): strings.Repeat("b", 24) + "_" + hash6(strings.Repeat("b", 32)),
			},
		},
		{
			name:      "duplicates map once",
			namespace: "d",
			names:     []string{"x.y", "x.y", "z"},
			want:      map[string]string{"x.y": "x_y_" + hash6("x.y"), "z": "z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Methods(tt.namespace, tt.names)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d methods %v, want %d", len(got), got, len(tt.want))
			}
			for name, want := range tt.want {
				if got[name] != want {
					t.Errorf("%q → %q, want %q", name, got[name], want)
				}
			}
			checkValid(t, tt.namespace, got)
		})
	}
}

// checkValid fails unless every method makes a valid tool name and no two names share one.
func checkValid(t *testing.T, namespace string, methods map[string]string) {
	t.Helper()
	ns := namespace
	if ns == "" {
		ns = strings.Repeat("n", messages.MaxNamespaceLength)
	}
	seen := map[string]string{}
	for name, method := range methods {
		if err := (messages.ToolName{Namespace: ns, Method: method}).Validate(); err != nil {
			t.Errorf("%q → %q: %v", name, method, err)
		}
		if other, dup := seen[method]; dup {
			t.Errorf("%q and %q share method %q", name, other, method)
		}
		seen[method] = name
	}
}

func TestMethodsIgnoreOrder(t *testing.T) {
	names := []string{"a.b", "a/b", "a b", "a_b", "a-b", strings.Repeat("x.", 60), strings.Repeat("x/", 60), "", "tool"}
	want := Methods("ns", names)
	checkValid(t, "ns", want)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		shuffled := append([]string(nil), names...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := Methods("ns", shuffled)
		for name, method := range want {
			if got[name] != method {
				t.Fatalf("order %q: %q → %q, first %q", shuffled, name, got[name], method)
			}
		}
	}
}

func TestMethodsLongNamesStayDistinct(t *testing.T) {
	prefix := strings.Repeat("namespace.section.", 5)
	var names []string
	for i := range 50 {
		names = append(names, prefix+strings.Repeat("z", i))
	}
	methods := Methods("a_long_namespace_name", names)
	checkValid(t, "a_long_namespace_name", methods)
	for _, m := range methods {
		if len("a_long_namespace_name-"+m) != messages.MaxToolNameLength {
			t.Errorf("method %q does not use the room it has", m)
		}
	}
}

func FuzzMethods(f *testing.F) {
	f.Add("files.read", "files/read", "ns")
	f.Add("", "a", "")
	f.Fuzz(func(t *testing.T, a, b, ns string) {
		if messages.ValidateNamespace(ns) != nil {
			ns = "ns"
		}
		checkValid(t, ns, Methods(ns, []string{a, b}))
	})
}
