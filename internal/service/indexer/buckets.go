package indexer

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/wire/transport"
	"github.com/toolbus/toolbus/pkg/messages"
)

// followed is a key-value bucket the indexer reads and watches without
// consumers: nats.go's watches and key listings create one, and a user
// that may create a consumer names where the stream delivers, a subject
// another role's data is stored on included (docs/security.md). Its
// watches and listings read the bucket's messages by direct get instead
// (transport.WatchKV, transport.ListKV), woken by the headers the
// bucket's stream republishes on names.BucketChanges; everything else is
// the bucket's own. Watch options are not supported.
type followed struct {
	jetstream.KeyValue
	nc    *nats.Conn
	names messages.Names
}

func (b followed) Watch(ctx context.Context, keys string, _ ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return transport.WatchKV(ctx, b.nc, transport.KVWatchConfig{
		Bucket:  b.Bucket(),
		Keys:    keys,
		Changes: b.names.BucketChanges(b.Bucket(), keys),
	})
}

func (b followed) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return b.Watch(ctx, ">", opts...)
}

func (b followed) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	var keys []string
	for _, f := range filters {
		got, err := transport.ListKV(ctx, b.nc, b.Bucket(), f)
		if err != nil {
			return nil, err
		}
		keys = append(keys, got...)
	}
	return newKeyList(keys), nil
}

func (b followed) ListKeys(ctx context.Context, _ ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	return b.ListKeysFiltered(ctx, ">")
}

// keyList is a listing read in full.
type keyList struct{ keys chan string }

func newKeyList(keys []string) keyList {
	l := keyList{keys: make(chan string, len(keys))}
	for _, k := range keys {
		l.keys <- k
	}
	close(l.keys)
	return l
}

func (l keyList) Keys() <-chan string { return l.keys }
func (l keyList) Stop() error         { return nil }
