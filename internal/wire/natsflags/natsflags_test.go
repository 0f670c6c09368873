package natsflags

import (
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv/embedded"
)

func TestInboxPrefix(t *testing.T) {
	for user, want := range map[string]string{
		"worker_demo": "_INBOX_worker_demo",
		"coordinator": "_INBOX_coordinator",
		"":            "",
		"a.b":         "",
		"*":           "",
		">":           "",
		"two words":   "",
	} {
		if got := InboxPrefix(user); got != want {
			t.Errorf("InboxPrefix(%q) = %q, want %q", user, got, want)
		}
	}
}

// TestConnectUsesTheUsersInbox checks the prefix a connection receives its
// replies under: the user's own, unless the flags name another.
func TestConnectUsesTheUsersInbox(t *testing.T) {
	srv := embedded.Server(t)
	for _, tc := range []struct {
		flags Flags
		want  string
	}{
		{Flags{User: "worker_demo", Password: "x"}, "_INBOX_worker_demo"},
		{Flags{User: "worker_demo", Password: "x", Inbox: "_INBOX"}, "_INBOX"},
		{Flags{}, ""},
	} {
		tc.flags.Server = srv.URL()
		nc, err := tc.flags.Connect("test")
		if err != nil {
			t.Fatal(err)
		}
		if got := nc.Opts.InboxPrefix; got != tc.want {
			t.Errorf("%+v: inbox prefix %q, want %q", tc.flags, got, tc.want)
		}
		nc.Close()
	}
}
