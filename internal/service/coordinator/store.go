package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// bucket is a kvStore on a JetStream key-value bucket. Each operation is
// retried while the bucket does not answer (see retryTransient), at most
// wait (Config.UnavailableWait; 0 is DefaultUnavailableWait). A write
// retried after its first attempt was stored unanswered is answered
// errKeyExists or errStale, which its callers read as a concurrent write:
// they read the key again.
type bucket struct {
	kv   jetstream.KeyValue
	wait time.Duration
}

func (b bucket) retry(ctx context.Context, op func(ctx context.Context) error) error {
	wait := b.wait
	if wait <= 0 {
		wait = DefaultUnavailableWait
	}
	return retryTransient(ctx, wait, op)
}

func (b bucket) Get(ctx context.Context, key string) (value []byte, revision uint64, err error) {
	err = b.retry(ctx, func(ctx context.Context) error {
		e, err := b.kv.Get(ctx, key)
		if err != nil {
			return err
		}
		value, revision = e.Value(), e.Revision()
		return nil
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errNoKey
	}
	return value, revision, err
}

func (b bucket) Create(ctx context.Context, key string, value []byte) (rev uint64, err error) {
	err = b.retry(ctx, func(ctx context.Context) (err error) {
		rev, err = b.kv.Create(ctx, key, value)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("%w: %v", errKeyExists, err)
	}
	return rev, err
}

func (b bucket) Update(ctx context.Context, key string, value []byte, revision uint64) (rev uint64, err error) {
	err = b.retry(ctx, func(ctx context.Context) (err error) {
		rev, err = b.kv.Update(ctx, key, value, revision)
		return err
	})
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)) {
		return 0, fmt.Errorf("%w: %v", errStale, err)
	}
	return rev, err
}

func (b bucket) Put(ctx context.Context, key string, value []byte) (rev uint64, err error) {
	err = b.retry(ctx, func(ctx context.Context) (err error) {
		rev, err = b.kv.Put(ctx, key, value)
		return err
	})
	return rev, err
}

func (b bucket) Keys(ctx context.Context, filter string) (keys []string, err error) {
	err = b.retry(ctx, func(ctx context.Context) error {
		keys = keys[:0]
		lister, err := b.kv.ListKeysFiltered(ctx, filter)
		if err != nil {
			return err
		}
		// The lister stops itself after the last key, or when ctx ends.
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		return ctx.Err()
	})
	return keys, err
}
