package client

import (
	"context"

	"github.com/toolbus/toolbus/pkg/messages"
)

// ExplainPolicy asks which rule of the policy in force decides a call of
// the tool with the arguments by the agent, and why (policy.explain).
// Nothing is called. With identities the coordinator refuses it with
// forbidden unless the client's user is an operator.
func (c *Client) ExplainPolicy(ctx context.Context, req messages.PolicyExplainRequest) (*messages.PolicyExplainReply, error) {
	var out messages.PolicyExplainReply
	return &out, c.request(ctx, messages.EndpointPolicyExplain, &req, &out, read, 0)
}
