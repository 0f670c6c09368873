package sources

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnsetVariable is returned by ExpandValue for a ${NAME} whose variable
// is not set.
var ErrUnsetVariable = errors.New("environment variable is not set")

// ExpandValue resolves a value written in a configuration, so that secrets
// such as tokens in headers need not be written there:
//
//	"file:/run/secrets/token"  the content of the file, without its trailing newline
//	"Bearer ${API_TOKEN}"      every ${NAME} replaced by the environment variable NAME
//
// A relative file path is relative to dir. A variable that is not set, or
// set to nothing, is an error wrapping ErrUnsetVariable, as is a file that
// cannot be read; a value with neither form is returned as it is.
func ExpandValue(value, dir string) (string, error) {
	if path, ok := strings.CutPrefix(value, "file:"); ok {
		if path == "" {
			return "", errors.New(`"file:" names no file`)
		}
		if !filepath.IsAbs(path) && dir != "" {
			path = filepath.Join(dir, path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read %w", err)
		}
		return strings.TrimRight(string(data), "\r\n"), nil
	}
	var b strings.Builder
	rest := value
	for {
		start := strings.Index(rest, "${")
		if start < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		end := strings.IndexByte(rest[start:], '}')
		if end < 0 {
			return "", fmt.Errorf("%q has a ${ without its }", value)
		}
		name := rest[start+2 : start+end]
		if name == "" {
			return "", fmt.Errorf("%q has an empty ${}", value)
		}
		v := os.Getenv(name)
		if v == "" {
			return "", fmt.Errorf("%w: %s", ErrUnsetVariable, name)
		}
		b.WriteString(rest[:start])
		b.WriteString(v)
		rest = rest[start+end+1:]
	}
}

// CheckHeaderValue reports a value that cannot be sent as an HTTP header's:
// one holding a line break, NUL or another control character but a tab,
// as a file or variable read for a header may. The value itself, often a
// secret, is not quoted in the error.
func CheckHeaderValue(value string) error {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("the value holds a control character (byte %d is %#x): a header's value is one line", i, c)
		}
	}
	return nil
}
