package coordinator

import (
	"testing"

	"github.com/toolbus/toolbus/pkg/messages"
)

// A request's copies are told by their reply token when they carry a valid
// one, whatever reply subject the server gave each; without one, by the
// reply subject; a token of another form does not count.
func TestCopiesAreToldByTokenThenReplySubject(t *testing.T) {
	token := "tok_0123456789abcdef"
	withToken := map[string][]string{messages.HeaderReplyToken: {token}}
	if a, b := answerKey("_R_.a.1", withToken), answerKey("_R_.a.2", withToken); a != b || a == "" {
		t.Errorf("copies with one token, reply subjects of their own: %q and %q, want one key", a, b)
	}
	if a, b := answerKey("_INBOX.x", nil), answerKey("_INBOX.y", nil); a == b {
		t.Errorf("two requests without tokens to two inboxes share the key %q", a)
	}
	bad := map[string][]string{messages.HeaderReplyToken: {"short"}}
	if a, b := answerKey("_INBOX.x", bad), answerKey("_INBOX.y", bad); a == b {
		t.Errorf("a token of the wrong form made two requests to two inboxes copies: %q", a)
	}
	if k := answerKey("", nil); k != "" {
		t.Errorf("a request with neither a token nor a reply subject has the key %q", k)
	}

	var s requestsInHand
	done, isCopy := s.take("k", answerKey("_R_.a.1", withToken), "AGENTS/agent_a", []byte("body"))
	if isCopy {
		t.Fatal("the first request was taken for a copy")
	}
	if _, isCopy := s.take("k", answerKey("_R_.a.2", withToken), "AGENTS/agent_a", []byte("body")); !isCopy {
		t.Error("a copy with the first's token and body, from its user, was not left to the first")
	}
	for name, other := range map[string]func() bool{
		"another user": func() bool {
			_, c := s.take("k", answerKey("_R_.a.3", withToken), "AGENTS/agent_b", []byte("body"))
			return c
		},
		"another body": func() bool {
			_, c := s.take("k", answerKey("_R_.a.4", withToken), "AGENTS/agent_a", []byte("other"))
			return c
		},
		"no token": func() bool {
			_, c := s.take("k", answerKey("_R_.a.5", nil), "AGENTS/agent_a", []byte("body"))
			return c
		},
	} {
		if other() {
			t.Errorf("a request with %s was left to the first's answer", name)
		}
	}
	done()
	if _, isCopy := s.take("k", answerKey("_R_.a.6", withToken), "AGENTS/agent_a", []byte("body")); isCopy {
		t.Error("a request sent again after the first was answered was taken for a copy")
	}
}
