package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVWatchConfig configures WatchKV.
type KVWatchConfig struct {
	// Bucket is the key-value bucket's name (its stream is KV_<Bucket>).
	// Required.
	Bucket string
	// Keys filters the keys followed, as a subject filter of keys ("tools.>",
	// "lease"). Defaults to every key (">").
	Keys string
	// Changes is a subject on which the bucket's stream republishes what it
	// stores (RePublish, headers only is enough), "" for none: a message
	// there starts a read at once. Without it, or when a copy is lost, the
	// watch still sees every change at its next Poll.
	Changes string
	// Poll is how often the watch reads what the bucket stored since it
	// last read. Defaults to one second.
	Poll time.Duration
}

// WatchKV follows a key-value bucket without a consumer, where nats.go's
// watch creates one: a user that may create a consumer names where the
// stream delivers, and a stream whose subjects cover that subject stores
// what it delivers there, so a service that should not write another's
// subjects must not be able to create one (docs/security.md). It reads the
// bucket's messages in the order of their sequences by batched direct
// gets, the current values first (then nil, as a watch of nats.go sends),
// and from then on every message stored after the last one read, each time
// Changes says something was stored and at least every Poll. Between two
// reads a key changed twice yields its latest value only, as a bucket that
// keeps one value per key holds no other. Deleted and purged keys come as
// entries whose Operation says so. Reads that fail are made again at the
// next Poll. The watch ends, and its channel closes, when ctx ends or Stop
// is called.
func WatchKV(ctx context.Context, nc *nats.Conn, cfg KVWatchConfig) (jetstream.KeyWatcher, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("transport: KVWatchConfig.Bucket is required")
	}
	if cfg.Keys == "" {
		cfg.Keys = ">"
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &kvWatch{
		cfg:     cfg,
		scan:    newKVScan(nc, cfg.Bucket, cfg.Keys),
		updates: make(chan jetstream.KeyValueEntry, 64),
		wake:    make(chan struct{}, 1),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	if cfg.Changes != "" {
		sub, err := nc.Subscribe(cfg.Changes, func(*nats.Msg) { w.signal() })
		if err != nil {
			cancel()
			return nil, fmt.Errorf("watch bucket %s: %w", cfg.Bucket, err)
		}
		w.sub = sub
	}
	// The current values are read before the watch returns, so that a
	// bucket that cannot be read fails it, as nats.go's watch fails.
	var initial []*kvEntry
	if err := w.scan.read(ctx, func(e *kvEntry) bool { initial = append(initial, e); return true }); err != nil {
		cancel()
		if w.sub != nil {
			_ = w.sub.Unsubscribe()
		}
		return nil, fmt.Errorf("watch bucket %s: %w", cfg.Bucket, err)
	}
	go w.run(ctx, initial)
	return w, nil
}

type kvWatch struct {
	cfg     KVWatchConfig
	scan    *kvScan
	sub     *nats.Subscription
	updates chan jetstream.KeyValueEntry
	wake    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	stop    sync.Once
}

func (w *kvWatch) Updates() <-chan jetstream.KeyValueEntry { return w.updates }

func (w *kvWatch) Stop() error {
	w.stop.Do(func() {
		w.cancel()
		if w.sub != nil {
			_ = w.sub.Unsubscribe()
		}
	})
	<-w.done
	return nil
}

func (w *kvWatch) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// kvBatch is how many messages one read asks for.
const kvBatch = 256

func (w *kvWatch) run(ctx context.Context, initial []*kvEntry) {
	defer close(w.done)
	defer close(w.updates)
	send := func(e *kvEntry) bool {
		select {
		case w.updates <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for _, e := range initial {
		if !send(e) {
			return
		}
	}
	initial = nil
	select {
	case w.updates <- nil:
	case <-ctx.Done():
		return
	}
	poll := time.NewTicker(w.cfg.Poll)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-poll.C:
		}
		// A read that fails is made again at the next signal or poll.
		_ = w.scan.readNew(ctx, send)
	}
}

// kvScan reads the messages of a bucket under some keys in the order of
// their sequences, by batched direct gets, each from the one after the
// last it read.
type kvScan struct {
	stream         *Stream
	bucket, prefix string
	filter         string
	// last is the sequence of the last message read.
	last uint64
}

func newKVScan(nc *nats.Conn, bucket, keys string) *kvScan {
	prefix := "$KV." + bucket + "."
	return &kvScan{stream: NewStream(nc, nil, "KV_"+bucket), bucket: bucket, prefix: prefix, filter: prefix + keys}
}

// read hands emit every message stored after the last one read, in order,
// until emit returns false.
func (s *kvScan) read(ctx context.Context, emit func(*kvEntry) bool) error {
	for {
		n := 0
		stopped := false
		err := s.stream.GetBatch(ctx, BatchRequest{Seq: s.last + 1, NextBySubject: s.filter, Batch: kvBatch}, func(seq uint64, msg *nats.Msg) bool {
			n++
			stopped = !s.take(seq, msg, emit)
			return !stopped
		})
		switch {
		case stopped:
			return ctx.Err()
		case err != nil:
			return err
		case n < kvBatch:
			return nil
		}
	}
}

// kvSingleReads is how many messages readNew reads one at a time before
// it reads the rest in batches.
const kvSingleReads = 4

// readNew is read for a watch that keeps up: the messages stored since the
// last read, one single read each (and one that finds none), which
// costs the server no count of the pending messages (see Stream.GetNext);
// past kvSingleReads, the rest in batches.
func (s *kvScan) readNew(ctx context.Context, emit func(*kvEntry) bool) error {
	for range kvSingleReads {
		msg, seq, err := s.stream.GetNext(ctx, s.last+1, s.filter)
		switch {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		if !s.take(seq, msg, emit) {
			return ctx.Err()
		}
	}
	return s.read(ctx, emit)
}

// take hands emit the message read at seq, unless an earlier read took
// it, and reports whether emit wants more.
func (s *kvScan) take(seq uint64, msg *nats.Msg, emit func(*kvEntry) bool) bool {
	if seq <= s.last {
		return true
	}
	s.last = seq
	e := kvEntryOf(s.bucket, s.prefix, seq, msg)
	return e == nil || emit(e)
}

// kvEntryOf reads a stored message of a bucket as the entry it is, or nil
// if its subject is no key of the bucket.
func kvEntryOf(bucket, prefix string, seq uint64, msg *nats.Msg) *kvEntry {
	subject := msg.Header.Get("Nats-Subject")
	if subject == "" {
		subject = msg.Subject
	}
	key, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return nil
	}
	e := &kvEntry{bucket: bucket, key: key, value: msg.Data, revision: seq, op: jetstream.KeyValuePut}
	switch msg.Header.Get("KV-Operation") {
	case "DEL":
		e.op = jetstream.KeyValueDelete
	case "PURGE":
		e.op = jetstream.KeyValuePurge
	}
	if ts := msg.Header.Get("Nats-Time-Stamp"); ts != "" {
		e.created, _ = time.Parse(time.RFC3339Nano, ts)
	}
	if pending, err := strconv.ParseUint(msg.Header.Get("Nats-Num-Pending"), 10, 64); err == nil {
		e.delta = pending
	}
	return e
}

// kvEntry is one value, deletion or purge of a key.
type kvEntry struct {
	bucket, key string
	value       []byte
	revision    uint64
	created     time.Time
	delta       uint64
	op          jetstream.KeyValueOp
}

func (e *kvEntry) Bucket() string                  { return e.bucket }
func (e *kvEntry) Key() string                     { return e.key }
func (e *kvEntry) Value() []byte                   { return e.value }
func (e *kvEntry) Revision() uint64                { return e.revision }
func (e *kvEntry) Created() time.Time              { return e.created }
func (e *kvEntry) Delta() uint64                   { return e.delta }
func (e *kvEntry) Operation() jetstream.KeyValueOp { return e.op }

// ListKV returns the keys of a bucket that match the key filter keys and
// hold a value (not deleted or purged), read by batched direct gets, like
// WatchKV, without a consumer.
func ListKV(ctx context.Context, nc *nats.Conn, bucket, keys string) ([]string, error) {
	live := map[string]bool{}
	var order []string
	err := newKVScan(nc, bucket, keys).read(ctx, func(e *kvEntry) bool {
		if _, seen := live[e.key]; !seen {
			order = append(order, e.key)
		}
		live[e.key] = e.op == jetstream.KeyValuePut
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of bucket %s: %w", bucket, err)
	}
	out := order[:0]
	for _, k := range order {
		if live[k] {
			out = append(out, k)
		}
	}
	return out, nil
}
