package coordinator

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/pkg/messages"
)

// signedCaller is the caller the server describes for a user of account
// akp whose JWT edit shapes.
func signedCaller(t *testing.T, akp nkeys.KeyPair, edit func(*jwt.UserClaims)) *caller {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	apub, _ := akp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "bot"
	uc.Sub.Allow.Add("_INBOX_bot.>", "toolbus.results.Hq5lB0vBvBHVcFsm2lS4oM.>", "toolbus.results.notaroute.>", "other.results.Hq5lB0vBvBHVcFsm2lS4oX.>", "Hq5lB0vBvBHVcFsm2lS4oY.>", "toolbus.results.Hq5lB0vBvBHVcFsm2lS4oZ")
	edit(uc)
	token, err := uc.Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	return &caller{Account: apub, User: upub, JWT: token}
}

// TestSignedClaims: the coordinator reads what a user may do from the
// Toolbus tags of its JWT and its routes from its subscribe permissions;
// it refuses a user whose claims it cannot use whole, whose JWT is not the
// caller's, or whose credentials have expired, and leaves a JWT without
// Toolbus tags to the identities file.
func TestSignedClaims(t *testing.T) {
	t.Parallel()
	akp, _ := nkeys.CreateAccount()
	g := &guard{prefix: "toolbus"}

	c := signedCaller(t, akp, func(uc *jwt.UserClaims) {
		uc.Tags = jwt.TagList{messages.ClaimTagAgent + "Support-Bot", messages.ClaimTagAgent + "triage-*", "team:billing"}
	})
	id, err := g.identify(c)
	if err != nil {
		t.Fatal(err)
	}
	if id.caller.User != "bot" || id.caller.key != c.User || id.user.Operator {
		t.Errorf("identity %+v of %+v", id.user, id.caller)
	}
	if got := strings.Join(id.user.Routes, ","); got != "Hq5lB0vBvBHVcFsm2lS4oM" {
		t.Errorf("routes %s", got)
	}
	for agent, may := range map[string]bool{"Support-Bot": true, "support-bot": false, "triage-4": true, "billing-bot": false} {
		if id.mayActAs(agent) != may {
			t.Errorf("may act as %s: %v", agent, !may)
		}
	}

	op, err := g.identify(signedCaller(t, akp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagOperator} }))
	if err != nil || !op.user.Operator || !op.mayActAs("anyone") {
		t.Errorf("an operator: %+v %v", op, err)
	}

	for what, c := range map[string]*caller{
		"a subject wildcard": signedCaller(t, akp, func(uc *jwt.UserClaims) {
			uc.Tags = jwt.TagList{messages.ClaimTagAgent + "support-bot", messages.ClaimTagAgent + ">"}
		}),
		"every agent":    signedCaller(t, akp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagAgent + "**"} }),
		"an unknown tag": signedCaller(t, akp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagPrefix + "root"} }),
		"expired": signedCaller(t, akp, func(uc *jwt.UserClaims) {
			uc.Tags = jwt.TagList{messages.ClaimTagOperator}
			uc.Expires = time.Now().Add(-time.Second).Unix()
		}),
		"no Toolbus claims": signedCaller(t, akp, func(uc *jwt.UserClaims) {}),
	} {
		if _, err := g.identify(c); !errors.Is(err, messages.ErrForbidden) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	// Another user's JWT in the caller's request info.
	a := signedCaller(t, akp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagOperator} })
	b := signedCaller(t, akp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagAgent + "bot"} })
	b.JWT = a.JWT
	if _, err := g.identify(b); !errors.Is(err, messages.ErrForbidden) || !strings.Contains(err.Error(), "not of its caller") {
		t.Errorf("another user's JWT: %v", err)
	}
	// A JWT whose signature does not hold.
	parts := strings.Split(a.JWT, ".")
	a.JWT = parts[0] + "." + parts[1] + "." + strings.Repeat("A", len(parts[2]))
	if _, err := g.identify(a); !errors.Is(err, messages.ErrForbidden) {
		t.Errorf("a broken signature: %v", err)
	}
	// Without Toolbus claims, the identities file names the user by key.
	plain := signedCaller(t, akp, func(uc *jwt.UserClaims) {})
	g.ids = &Identities{Users: map[string]UserIdentity{plain.User: {Agents: []string{"legacy-bot"}}}}
	if id, err := g.identify(plain); err != nil || !id.mayActAs("legacy-bot") {
		t.Errorf("a user of the identities file: %+v %v", id, err)
	}
}

// issuedCaller is the caller the server describes for a user an auth
// callout issued with signing key skp of account akp: no JWT, the key
// that signed the user, and the name the callout gave it, a JWT of its
// claims that edit shapes, signed by claimsKey.
func issuedCaller(t *testing.T, akp, skp, claimsKey nkeys.KeyPair, edit func(*jwt.UserClaims)) *caller {
	t.Helper()
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	apub, _ := akp.PublicKey()
	spub, _ := skp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "oidc:alice"
	uc.IssuerAccount = apub
	uc.Expires = time.Now().Add(time.Hour).Unix()
	uc.Tags = jwt.TagList{messages.ClaimTagAgent + "support-bot"}
	edit(uc)
	token, err := uc.Encode(claimsKey)
	if err != nil {
		t.Fatal(err)
	}
	return &caller{Account: apub, User: token, IssuerKey: spub}
}

// TestCalloutUsersClaims: the claims of a user the auth callout issued are
// read from its name when the key that signed them is the one the server
// says signed the user, for the caller's account; claims another key
// signed, of another account, without Toolbus tags, expired, or naming a
// subject wildcard are refused, and a name that is a JWT counts for
// nothing when the user was signed by its account's own key.
func TestCalloutUsersClaims(t *testing.T) {
	t.Parallel()
	akp, _ := nkeys.CreateAccount()
	skp, _ := nkeys.CreateAccount()
	other, _ := nkeys.CreateAccount()
	g := &guard{prefix: "toolbus"}

	c := issuedCaller(t, akp, skp, skp, func(*jwt.UserClaims) {})
	id, err := g.identify(c)
	if err != nil {
		t.Fatal(err)
	}
	if id.caller.User != "oidc:alice" || !id.mayActAs("support-bot") || id.mayActAs("billing-bot") || id.user.Operator || len(id.user.Routes) != 0 {
		t.Errorf("identity %+v of %+v", id.user, id.caller)
	}
	if id.caller.String() != c.Account+"/oidc:alice" {
		t.Errorf("the caller is named %s", id.caller)
	}

	otherPub, _ := other.PublicKey()
	for what, c := range map[string]*caller{
		"claims another key signed":   issuedCaller(t, akp, skp, other, func(uc *jwt.UserClaims) { uc.IssuerAccount = "" }),
		"claims of another account":   issuedCaller(t, akp, skp, skp, func(uc *jwt.UserClaims) { uc.IssuerAccount = otherPub }),
		"claims without Toolbus tags": issuedCaller(t, akp, skp, skp, func(uc *jwt.UserClaims) { uc.Tags = nil }),
		"expired claims":              issuedCaller(t, akp, skp, skp, func(uc *jwt.UserClaims) { uc.Expires = time.Now().Add(-time.Second).Unix() }),
		"a subject wildcard":          issuedCaller(t, akp, skp, skp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagAgent + "support.>"} }),
		"a wildcard alone":            issuedCaller(t, akp, skp, skp, func(uc *jwt.UserClaims) { uc.Tags = jwt.TagList{messages.ClaimTagAgent + "*"} }),
	} {
		if _, err := g.identify(c); !errors.Is(err, messages.ErrForbidden) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	// Signed by the account's own key, the user is one whose JWT the server
	// keeps: a name that is a JWT is only a name, and without an identities
	// file the caller is refused.
	own := issuedCaller(t, akp, akp, akp, func(uc *jwt.UserClaims) { uc.IssuerAccount = "" })
	if _, err := g.identify(own); !errors.Is(err, messages.ErrForbidden) || !strings.Contains(err.Error(), "no identities file") {
		t.Errorf("a JWT as the name of a user of the account's own key: %v", err)
	}
	// A forged Nats-Request-Info never gets here (the server replaces it);
	// the guard admits a callout's user without an identities file.
	ctx, err := g.admit(t.Context(), messages.EndpointToolsList, map[string][]string{RequestInfoHeader: {mustJSON(t, c)}}, &messages.ListToolsRequest{Agent: "support-bot"})
	if err != nil || identityOf(ctx) == nil {
		t.Errorf("admit: %v", err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRefusedCalloutUserIsAuditedByKey: a refused callout user is audited
// by the key that issued it, not by its unchecked name.
func TestRefusedCalloutUserIsAuditedByKey(t *testing.T) {
	akp, _ := nkeys.CreateAccount()
	skp, _ := nkeys.CreateAccount()
	var records []*messages.AuditRecord
	g := &guard{prefix: "toolbus", audit: func(rec *messages.AuditRecord) { records = append(records, rec) }}
	c := issuedCaller(t, akp, skp, skp, func(uc *jwt.UserClaims) { uc.Tags = nil })
	if _, err := g.admit(t.Context(), messages.EndpointToolsList, map[string][]string{RequestInfoHeader: {mustJSON(t, c)}}, &messages.ListToolsRequest{}); !errors.Is(err, messages.ErrForbidden) {
		t.Fatalf("admit: %v", err)
	}
	if len(records) != 1 || records[0].By != c.Account+"/(a user of signing key "+c.IssuerKey+")" {
		t.Errorf("audited %+v", records)
	}
}
