package messages

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestTokenInbox: the inbox prefix of a token's user is the one
// docs/protocol.md computes for its example, read from a token's iss and
// sub; a token that is not a JWT, or names no issuer or subject, has none.
func TestTokenInbox(t *testing.T) {
	const issuer, want = "https://login.example.com/realms/main", "_INBOX_oidc_eac1858230672405dc144be6a6391e6f"
	if got := TokenInbox(issuer, "alice"); got != want {
		t.Errorf("TokenInbox = %s, want %s", got, want)
	}
	if TokenInbox(issuer, "bob") == want || TokenInbox(issuer+"/", "alice") == want {
		t.Error("another subject or issuer has the same inbox")
	}
	payload := func(json string) string {
		return "eyJhbGciOiJFUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(json)) + ".c2ln"
	}
	if got, err := TokenInboxOf(payload(`{"iss":"` + issuer + `","sub":"alice","aud":"toolbus"}`)); err != nil || got != want {
		t.Errorf("TokenInboxOf = %s %v, want %s", got, err, want)
	}
	for _, bad := range []string{"not-a-token", "a.b", payload(`{"sub":"alice"}`), payload(`{"iss":"` + issuer + `"}`), payload(`[1]`), "a.%%%.c"} {
		if got, err := TokenInboxOf(bad); err == nil || got != "" || !strings.Contains(err.Error(), "token") {
			t.Errorf("TokenInboxOf(%q) = %q %v, want an error naming the token", bad, got, err)
		}
	}
}
