package messages

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// A client that connects with an OpenID Connect token (as the NATS
// connection's token, which Toolbus's auth callout checks) receives its
// replies under an inbox prefix of its own, which the callout lets its
// user subscribe to and no other: TokenInbox of the token's issuer and
// subject. A client in another language computes it the same way from
// its token's iss and sub claims.

// TokenInboxID is the part of the inbox prefix of a token's user that
// names it: "oidc_" and the first 16 bytes, in hex, of the SHA-256 of the
// issuer, a line feed and the subject.
func TokenInboxID(issuer, subject string) string {
	sum := sha256.Sum256([]byte(issuer + "\n" + subject))
	return "oidc_" + hex.EncodeToString(sum[:16])
}

// TokenInbox is the inbox prefix of the connections of a token's user:
// "_INBOX_" and TokenInboxID.
func TokenInbox(issuer, subject string) string {
	return "_INBOX_" + TokenInboxID(issuer, subject)
}

// TokenInboxOf reads a JWT's iss and sub, without checking its signature
// (the server's callout does), and returns TokenInbox of them.
func TokenInboxOf(token string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("the token is not a JWT (header.payload.signature)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return "", fmt.Errorf("the token's payload is not base64url: %v", err)
	}
	var claims struct {
		Issuer  string `json:"iss"`
		Subject string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", fmt.Errorf("the token's payload is not a JSON object: %v", err)
	}
	if claims.Issuer == "" || claims.Subject == "" {
		return "", fmt.Errorf("the token names no issuer (iss) or no subject (sub)")
	}
	return TokenInbox(claims.Issuer, claims.Subject), nil
}
