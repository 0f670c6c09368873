package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

func TestArgumentsDigest(t *testing.T) {
	t.Parallel()
	sumOf := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	for _, tc := range []struct {
		name      string
		arguments string
		canonical string
	}{
		{"empty", "", `{}`},
		{"null", " null ", `{}`},
		{"key order", `{"b": 1, "a": {"d": [3, {"z": 1, "y": 2}], "c": true}}`, `{"a":{"c":true,"d":[3,{"y":2,"z":1}]},"b":1}`},
		{"whitespace", "{ \"a\" :\n[ 1 , 2 ]\t}", `{"a":[1,2]}`},
		{"numbers", `[1.0, 1e0, 10E-1, -0, 0.0e5, 1e21, 1e20, 0.000001, 1e-7, -12.50, 123456789012345678901234567890]`,
			`[1,1,1,0,0,1e+21,100000000000000000000,0.000001,1e-7,-12.5,1.2345678901234567890123456789e+29]`},
		{"huge exponent", `[1.5e123456789012345678, -2E-123456789012345678]`, `[1.5e+123456789012345678,-2e-123456789012345678]`},
		{"last duplicate wins", `{"a": 1, "a": 2}`, `{"a":2}`},
		{"strings", `["\u0041\/\"\\\b\f\n\r\t\u0001\u007f\u00e9\u2028"]`, "[\"A/\\\"\\\\\\b\\f\\n\\r\\t\\u0001\x7f\u00e9\u2028\"]"},
		{"keys in UTF-16 order", `{"\ufb01": 1, "\ud83d\ude00": 2, "b": 3}`, "{\"b\":3,\"\U0001F600\":2,\"\ufb01\":1}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ArgumentsDigest(messages.JSON(tc.arguments))
			if err != nil {
				t.Fatal(err)
			}
			if want := sumOf(tc.canonical); got != want {
				c, _ := canonicalize([]byte(strings.TrimSpace(tc.arguments) + " "))
				t.Fatalf("digest of %s is not that of %s; canonical form is %s", tc.arguments, tc.canonical, c)
			}
		})
	}

	a, _ := ArgumentsDigest(messages.JSON(`{"path": "/tmp/x", "mode": 420}`))
	b, _ := ArgumentsDigest(messages.JSON(`{"mode":420.0,"path":"/tmp/x"}`))
	c, _ := ArgumentsDigest(messages.JSON(`{"mode":420,"path":"/tmp/y"}`))
	if a != b || a == c {
		t.Fatalf("key order changed the digest or a value change did not: %s %s %s", a, b, c)
	}
	for _, bad := range []string{`{`, `{"a":1} x`, `{} {}`, `nul`, `{"a":01}`} {
		if d, err := ArgumentsDigest(messages.JSON(bad)); err == nil {
			t.Errorf("ArgumentsDigest(%s) = %s, want an error", bad, d)
		}
	}
}

func TestAppendNumber(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0": "0", "-0": "0", "0.000": "0", "0e10": "0", "-0.0e-3": "0",
		"1": "1", "100": "100", "1e2": "100", "1.5": "1.5", "150e-2": "1.5", "-1.25E+1": "-12.5",
		"0.1": "0.1", "0.0001234": "0.0001234", "0.0000001": "1e-7", "0.000001": "0.000001",
		"123e18": "123000000000000000000", "1e21": "1e+21", "12e20": "1.2e+21",
		"1.000000000000000000001":  "1.000000000000000000001",
		"1e-000005":                "0.00001",
		"5e0000000000000000000001": "50",
	} {
		if got := string(appendNumber(nil, in)); got != want {
			t.Errorf("appendNumber(%s) = %s, want %s", in, got, want)
		}
	}
}
