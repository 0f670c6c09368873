package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/pkg/messages"
)

// hashLength is the number of hexadecimal digits of the SHA-256 of an
// original name that mark a renamed method; more are taken in the unlikely
// case that these do not tell two names apart.
const hashLength = 6

// MaxMethodLength is the longest method that keeps "namespace-method" within
// messages.MaxToolNameLength. For an empty namespace it assumes the longest
// namespace there can be.
func MaxMethodLength(namespace string) int {
	n := len(namespace)
	if n == 0 {
		n = messages.MaxNamespaceLength
	}
	return messages.MaxToolNameLength - n - 1
}

// Methods maps the original names of one source's tools to the methods they
// are served under in namespace. The result is a pure function of the set of
// names, whatever their order, so a restarted worker serves every tool under
// the method it had.
//
// A name made only of letters, digits, '_' and '-' that fits the length
// limit is its own method. Any other name is renamed: each run of other
// characters becomes one '_', the result is cut to fit, and it ends in '_'
// and the first six hex digits of the SHA-256 of the original name:
//
//	"get-sum"     → "get-sum"
//	"files.read"  → "files_read_601e4e"
//	"files/read"  → "files_read_2b7331"
//	"search web"  → "search_web_5a0a9c"
//
// The suffix keeps two names that differ only in the characters that were
// replaced apart, shows that the method is not the source's own name, and
// ties each renamed method to its original alone: a tool the server adds
// later never takes over the method of another tool, as it could if only
// collisions were suffixed. Names that need no renaming are claimed first,
// so a renamed method never takes one of theirs; should two suffixes still
// collide, more digits are used.
func Methods(namespace string, names []string) map[string]string {
	limit := MaxMethodLength(namespace)
	originals := slices.Clone(names)
	slices.Sort(originals)
	originals = slices.Compact(originals)

	out := make(map[string]string, len(originals))
	taken := make(map[string]bool, len(originals))
	var renamed []string
	for _, name := range originals {
		if isMethod(name, limit) {
			out[name] = name
			taken[name] = true
		} else {
			renamed = append(renamed, name)
		}
	}
	for _, name := range renamed {
		base := sanitize(name)
		if base == "" {
			base = "tool"
		}
		digest := sha256.Sum256([]byte(name))
		hexDigest := hex.EncodeToString(digest[:])
		for n := hashLength; ; n++ {
			suffix := "_" + hexDigest[:n]
			stem := base
			if len(stem)+len(suffix) > limit {
				stem = strings.TrimRight(stem[:max(0, limit-len(suffix))], "_-")
			}
			method := stem + suffix
			if !taken[method] || n == len(hexDigest) {
				out[name] = method
				taken[method] = true
				break
			}
		}
	}
	return out
}

func isMethod(name string, limit int) bool {
	if name == "" || len(name) > limit {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !methodChar(name[i]) {
			return false
		}
	}
	return true
}

func methodChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// sanitize replaces every run of characters a method cannot hold with one
// '_' and trims '_' from both ends.
func sanitize(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	pending := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !methodChar(c) {
			pending = true
			continue
		}
		if pending && b.Len() > 0 {
			b.WriteByte('_')
		}
		pending = false
		b.WriteByte(c)
	}
	return strings.Trim(b.String(), "_")
}
