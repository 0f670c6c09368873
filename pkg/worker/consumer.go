package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// consumerRequestTimeout bounds one request for the namespace's consumer;
// consumerRequestTries is how many are sent before the worker gives up.
const (
	consumerRequestTimeout = 5 * time.Second
	consumerRequestTries   = 3
)

// ensureConsumer has a coordinator create or update the namespace's
// consumer to the namespace's settings (messages.ConsumerRequest on
// messages.ConsumerNames.RequestSubject), and returns once it has them. A
// worker does not manage consumers itself where a coordinator answers:
// a user that may create a consumer names where the stream delivers, and
// the deploy configurations give no worker that right. Only when no
// coordinator listens at all (no responders: a worker started first, on
// a server that lets it) does the worker create its consumer itself, as
// it would create a missing stream.
func (w *Worker) ensureConsumer(ctx context.Context, ns *namespace) error {
	subject, err := w.names.Consumers().RequestSubject(ns.Name)
	if err != nil {
		return err
	}
	req := messages.ConsumerRequest{MaxConcurrency: ns.MaxConcurrency, AckWaitMS: max(w.cfg.AckWait.Milliseconds(), messages.MinConsumerAckWaitMS), MaxAttempts: ns.MaxAttempts, Worker: w.cfg.ID}
	data, err := messages.Msgpack.Marshal(&req)
	if err != nil {
		return err
	}
	for try := 1; ; try++ {
		rctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
		reply, err := w.cfg.Conn.RequestMsgWithContext(rctx, &nats.Msg{Subject: subject, Header: nats.Header(messages.Msgpack.NewHeader()), Data: data})
		cancel()
		switch {
		case err == nil:
			return consumerReply(subject, reply)
		case errors.Is(err, nats.ErrNoResponders):
			return w.createConsumer(ctx, ns, subject)
		case ctx.Err() != nil:
			return fmt.Errorf("namespace %s: ask a coordinator for its consumer on %s: %w", ns.Name, subject, context.Cause(ctx))
		case try == consumerRequestTries:
			return fmt.Errorf("namespace %s: no coordinator answered on %s (%d tries): %w", ns.Name, subject, try, err)
		}
		w.log.Warn("a coordinator did not answer the request for the namespace's consumer; asking again", "namespace", ns.Name, "error", err)
	}
}

// consumerReply reads a coordinator's answer to a ConsumerRequest.
func consumerReply(subject string, reply *nats.Msg) error {
	if status := reply.Header.Get(micro.ErrorCodeHeader); status != "" {
		var e messages.Error
		if _, err := messages.Decode(messages.Header(reply.Header), reply.Data, &e); err == nil && e.Code != "" {
			return fmt.Errorf("the coordinator refused the consumer's settings: %w", &e)
		}
		return fmt.Errorf("the coordinator refused the consumer's settings (status %s): %s", status, reply.Header.Get(micro.ErrorHeader))
	}
	var out messages.ConsumerReply
	if _, err := messages.Decode(messages.Header(reply.Header), reply.Data, &out); err != nil {
		return fmt.Errorf("the coordinator's answer on %s: %w", subject, err)
	}
	return nil
}

// createConsumer creates or updates the namespace's consumer itself, where
// no coordinator listens.
func (w *Worker) createConsumer(ctx context.Context, ns *namespace, subject string) error {
	ctx, cancel := context.WithTimeout(ctx, consumerRequestTimeout)
	defer cancel()
	_, err := resources.EnsureNamespaceConsumer(ctx, w.js, w.names, resources.NamespaceConsumer{
		Namespace:      ns.Name,
		MaxConcurrency: ns.MaxConcurrency,
		AckWait:        w.cfg.AckWait,
		MaxAttempts:    ns.MaxAttempts,
	})
	if err != nil {
		return fmt.Errorf("namespace %s: no coordinator answers on %s, and the worker could not create the namespace's consumer itself (start a coordinator first): %w", ns.Name, subject, err)
	}
	return nil
}
