package sources

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpandValue(t *testing.T) {
	t.Setenv("TOOLBUS_TEST_TOKEN", "t0ken")
	t.Setenv("TOOLBUS_TEST_EMPTY", "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		value, want, err string
	}{
		{value: "plain", want: "plain"},
		{value: "Bearer ${TOOLBUS_TEST_TOKEN}", want: "Bearer t0ken"},
		{value: "${TOOLBUS_TEST_TOKEN}-${TOOLBUS_TEST_TOKEN}", want: "t0ken-t0ken"},
		{value: "file:secret", want: "from-file"},
		{value: "file:" + filepath.Join(dir, "secret"), want: "from-file"},
		{value: "${TOOLBUS_TEST_UNSET}", err: "environment variable is not set: TOOLBUS_TEST_UNSET"},
		{value: "${TOOLBUS_TEST_EMPTY}", err: "environment variable is not set: TOOLBUS_TEST_EMPTY"},
		{value: "file:missing", err: "missing"},
		{value: "${OPEN", err: "without its }"},
	}
	for _, tt := range tests {
		got, err := ExpandValue(tt.value, dir)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("%q: got %q, %v; want %q", tt.value, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: got %q, %v; want an error with %q", tt.value, got, err, tt.err)
		}
	}
	if _, err := ExpandValue("${TOOLBUS_TEST_UNSET}", dir); !errors.Is(err, ErrUnsetVariable) {
		t.Errorf("an unset variable: %v", err)
	}
}

func TestCheckHeaderValue(t *testing.T) {
	for _, ok := range []string{"", "Bearer t0ken", "a\tb", "ünïcode"} {
		if err := CheckHeaderValue(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"a\nb", "a\r\nX-Injected: 1", "a\x00", "a\x7f"} {
		err := CheckHeaderValue(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), bad) {
			t.Errorf("%q: the error quotes the value: %v", bad, err)
		}
	}
}
