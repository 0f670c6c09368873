package resources_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/dev/testenv"
	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// TestAuditStreamRefusesPurgeAndDelete checks that the server itself keeps
// the audit records, for a caller allowed every JetStream API: a purge, a
// filtered purge and the deletion of one record are refused, and the
// records are all still there.
func TestAuditStreamRefusesPurgeAndDelete(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	subject, _ := names.Audit().Subject("allowed")
	for range 3 {
		if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := js.Stream(ctx, names.Audit().Stream())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err == nil {
		t.Error("the audit stream was purged")
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err == nil {
		t.Error("the audit stream was purged of one subject")
	}
	if err := stream.DeleteMsg(ctx, 1); err == nil {
		t.Error("an audit record was deleted")
	}
	if err := stream.SecureDeleteMsg(ctx, 2); err == nil {
		t.Error("an audit record was erased")
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 3 || info.State.FirstSeq != 1 {
		t.Fatalf("audit records after the refused removals: %+v", info.State)
	}
}

// TestEnsureProtectsAnExistingAuditStream checks that an installation made
// before the audit stream refused purges gets the refusals from the next
// coordinator's Ensure, and keeps its records.
func TestEnsureProtectsAnExistingAuditStream(t *testing.T) {
	t.Parallel()
	js := setup(t)
	ctx := testenv.Context(t)
	names := messages.MustNames("")
	old := resources.AuditStreamConfig(names, resources.Config{})
	old.DenyPurge, old.DenyDelete = false, false
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	subject, _ := names.Audit().Subject("denied")
	if _, err := js.Publish(ctx, subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := resources.Ensure(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, names.Audit().Stream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	if !cfg.DenyPurge || !cfg.DenyDelete {
		t.Fatalf("after Ensure: deny_purge %v, deny_delete %v", cfg.DenyPurge, cfg.DenyDelete)
	}
	if err := stream.Purge(ctx); err == nil {
		t.Fatal("the protected audit stream was purged")
	}
	if info, err := stream.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("audit records: %+v %v", info, err)
	}
	// A worker's EnsureExisting leaves the stream as it is, and works.
	if err := resources.EnsureExisting(ctx, js, names, resources.Config{}); err != nil {
		t.Fatal(err)
	}
}
