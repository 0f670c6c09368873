package integration

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
)

// TestAuditProtectionCannotBeTurnedOff: the audit stream a coordinator
// creates refuses purges and deletes, and a configuration update that
// turns either refusal off is itself refused, whoever sends it (here a
// connection without any permissions in the way): only records older
// than the maximum age leave.
func TestAuditProtectionCannotBeTurnedOff(t *testing.T) {
	t.Parallel()
	srv := testenv.Server(t)
	testenv.Coordinator(t, srv.URL())
	ctx := testenv.Context(t)
	js, err := jetstream.New(testenv.Connect(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, names.Audit().Stream())
	if err != nil {
		t.Fatal(err)
	}
	protected := stream.CachedInfo().Config
	if !protected.DenyPurge || !protected.DenyDelete {
		t.Fatalf("the audit stream allows purges (%v) or deletes (%v)", !protected.DenyPurge, !protected.DenyDelete)
	}
	for what, turnOff := range map[string]func(*jetstream.StreamConfig){
		"purges":             func(c *jetstream.StreamConfig) { c.DenyPurge = false },
		"deletes":            func(c *jetstream.StreamConfig) { c.DenyDelete = false },
		"purges and deletes": func(c *jetstream.StreamConfig) { c.DenyPurge, c.DenyDelete = false, false },
	} {
		cfg := protected
		turnOff(&cfg)
		if _, err := js.UpdateStream(ctx, cfg); err == nil {
			t.Errorf("an update allowed %s in the audit stream", what)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Config.DenyPurge || !info.Config.DenyDelete {
		t.Fatalf("after the refused updates: deny_purge %v, deny_delete %v", info.Config.DenyPurge, info.Config.DenyDelete)
	}
}
