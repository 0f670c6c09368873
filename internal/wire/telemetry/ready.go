package telemetry

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/pkg/messages"
)

// ErrNotConnected is /readyz's answer while the process's NATS connection
// is down (reconnecting, or closed).
var ErrNotConnected = errors.New("not connected to NATS")

// NATSReady is the readiness of a process that works on NATS: its
// connection is up and the JetStream resources it uses answer.
type NATSReady struct {
	Conn *nats.Conn
	// Streams and Buckets (key-value buckets) must exist.
	Streams []string
	Buckets []string
	// Consumers must exist on the stream ConsumersStream.
	ConsumersStream string
	Consumers       []string
}

// CoordinatorResources are the streams and buckets a coordinator uses.
func CoordinatorResources(names messages.Names) NATSReady {
	return NATSReady{
		Streams: []string{names.EventsStream(), names.Audit().Stream()},
		Buckets: []string{names.CatalogBucket(), names.TurnsBucket(), names.ApprovalsBucket()},
	}
}

// WorkerResources are the bucket and consumers of a worker serving
// namespaces. The consumers' information says that the events stream is
// there: a worker's user may not read the stream's own, which would list
// every call (docs/security.md).
func WorkerResources(names messages.Names, namespaces []string) (NATSReady, error) {
	r := NATSReady{
		Buckets:         []string{names.CatalogBucket()},
		ConsumersStream: names.EventsStream(),
	}
	for _, ns := range namespaces {
		consumer, err := names.Consumers().Durable(ns)
		if err != nil {
			return NATSReady{}, err
		}
		r.Consumers = append(r.Consumers, consumer)
	}
	return r, nil
}

// Check is the readiness check, for Telemetry.SetReady.
func (r NATSReady) Check(ctx context.Context) error {
	if r.Conn == nil || !r.Conn.IsConnected() {
		return ErrNotConnected
	}
	if err := r.checkResources(ctx); err != nil {
		if !r.Conn.IsConnected() {
			// Lost while the resources were read: that is the cause.
			return ErrNotConnected
		}
		return err
	}
	return nil
}

func (r NATSReady) checkResources(ctx context.Context) error {
	js, err := jetstream.New(r.Conn)
	if err != nil {
		return err
	}
	for _, name := range r.Streams {
		if _, err := js.Stream(ctx, name); err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	for _, name := range r.Buckets {
		if _, err := js.KeyValue(ctx, name); err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
	}
	for _, name := range r.Consumers {
		if _, err := js.Consumer(ctx, r.ConsumersStream, name); err != nil {
			return fmt.Errorf("consumer %s: %w", name, err)
		}
	}
	return nil
}
