package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// kvStore is the part of a key-value bucket that the turns and approvals
// rooms use. Its errors are errNoKey, errKeyExists and errStale rather
// than JetStream's, so that what the rooms decide on them can be tested
// on a map.
type kvStore interface {
	// Get returns a key's value and revision, or errNoKey.
	Get(ctx context.Context, key string) (value []byte, revision uint64, err error)
	// Create writes a key that does not exist, or fails with errKeyExists.
	Create(ctx context.Context, key string, value []byte) (revision uint64, err error)
	// Update writes a key still at revision, or fails with errStale.
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	// Put writes a key whatever its revision.
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	// Keys lists the keys that match a subject filter.
	Keys(ctx context.Context, filter string) ([]string, error)
}

var (
	errNoKey     = errors.New("no such key")
	errKeyExists = errors.New("key exists")
	errStale     = errors.New("key changed since it was read")
)

// bucket is a kvStore on a JetStream key-value bucket.
type bucket struct{ kv jetstream.KeyValue }

func (b bucket) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := b.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errNoKey
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (b bucket) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := b.kv.Create(ctx, key, value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %v", errKeyExists, err)
	}
	return rev, err
}

func (b bucket) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := b.kv.Update(ctx, key, value, revision)
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
		return 0, fmt.Errorf("%w: %v", errStale, err)
	}
	return rev, err
}

func (b bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return b.kv.Put(ctx, key, value)
}

func (b bucket) Keys(ctx context.Context, filter string) ([]string, error) {
	lister, err := b.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	var keys []string
	// The lister stops itself after the last key, or when ctx ends.
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return keys, nil
}
