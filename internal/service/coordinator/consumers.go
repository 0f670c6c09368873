package coordinator

import (
	"context"
	"time"

	"github.com/toolbus/toolbus/internal/wire/resources"
	"github.com/toolbus/toolbus/pkg/messages"
)

// endpointConsumers names the workers' requests for their namespace's
// consumer in logs, metrics and audit records. Their subject is
// messages.ConsumerNames.RequestSubject, outside the API that agents reach.
const endpointConsumers = "consumers"

// consumer creates or updates the consumer of the namespace the request's
// subject names, to the settings a worker of that namespace sends when it
// starts (messages.ConsumerRequest), and creates the namespace's results
// store if it has none. Workers may not create consumers: a consumer's
// configuration names where the stream delivers (a push consumer's
// deliver subject), and the stream stores what it delivers on a subject
// of its own, another namespace's result included. The coordinator makes
// every namespace consumer a pull consumer with the namespace's filter.
// The subject is the authority: the deploy configurations let each
// namespace's account reach its own namespace's subject only.
func (c *Coordinator) consumer(ctx context.Context, req *request) (any, error) {
	ns := c.names.Consumers().RequestNamespace(req.Subject())
	if ns == "" {
		return nil, messages.Errorf(messages.CodeInvalidName, "%s names no namespace", req.Subject())
	}
	if err := c.guard.fromAClient(endpointConsumers, req.Request, nil); err != nil {
		return nil, err
	}
	var cr messages.ConsumerRequest
	if err := req.decode(&cr); err != nil {
		return nil, err
	}
	if err := cr.Validate(); err != nil {
		return nil, err
	}
	settings := resources.NamespaceConsumer{
		Namespace:      ns,
		MaxConcurrency: cr.MaxConcurrency,
		AckWait:        time.Duration(cr.AckWaitMS) * time.Millisecond,
		MaxAttempts:    cr.MaxAttempts,
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	cons, err := resources.EnsureNamespaceConsumer(ctx, c.js, c.names, settings)
	if err != nil {
		return nil, messages.Errorf(messages.CodeUnavailable, "namespace %s: %v", ns, err)
	}
	if _, err := resources.EnsureResultsBucket(ctx, c.js, c.names, ns); err != nil {
		c.log.Warn("the namespace's results store is not created; its workers will try", "namespace", ns, "error", err)
	}
	c.log.Info("namespace consumer configured for a worker", "namespace", ns, "worker", cr.Worker,
		"max_concurrency", cr.MaxConcurrency, "ack_wait", settings.AckWait, "max_attempts", cr.MaxAttempts)
	return &messages.ConsumerReply{Consumer: cons.CachedInfo().Name}, nil
}
