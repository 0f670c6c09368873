package coordinator

import (
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
