package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/toolbus/toolbus/pkg/messages"
	"github.com/toolbus/toolbus/pkg/worker"
)

// call runs one call of the tool the server calls original.
func (s *Source) call(ctx context.Context, original string, call *worker.Call) (*worker.Result, error) {
	sess, err := s.awaitSession(ctx)
	if err != nil {
		return nil, err
	}
	token := "toolbus-" + strconv.FormatUint(s.tokens.Add(1), 10)
	s.progress.Store(token, ctx)
	defer s.progress.Delete(token)

	var req mcpgo.CallToolRequest
	req.Params.Name = original
	if len(call.Arguments) > 0 {
		req.Params.Arguments = json.RawMessage(call.Arguments)
	}
	req.Params.Meta = &mcpgo.Meta{ProgressToken: token, AdditionalFields: traceContext(ctx)}
	id := &requestID{}
	res, err := sess.client.CallTool(context.WithValue(ctx, requestIDKey{}, id), req)
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if rid, sent := id.get(); sent {
			if err := sess.sendCancel(rid, cause.Error()); err != nil {
				s.log.Warn("MCP cancellation not sent", "call", call.ID, "error", err)
			}
		}
		return nil, cause
	}
	if err != nil {
		// The same call would get the same result again: it is the
		// call's failure, not the connection's, and is not retried.
		if rid, sent := id.get(); errors.Is(err, errMessageTooLarge) || sent && sess.wasSkipped(rid) {
			return nil, fmt.Errorf("MCP server %s: the result of tool %s is larger than %d bytes (32 MiB), the most one message from an MCP server may hold; it was not read", s.cfg.Name, original, maxMessageSize)
		}
		// A server that forgot the session answers with an error response;
		// the session watch has marked the session lost by then.
		if isTransportError(err) || sess.isLost() {
			sess.fail(err)
			return nil, worker.Retry(fmt.Errorf("MCP server %s: %w", s.cfg.Name, plainTransportError(err)))
		}
		return nil, fmt.Errorf("MCP server %s: %w", s.cfg.Name, err)
	}
	return toResult(res)
}

// toResult maps an MCP tool result to a worker result.
func toResult(res *mcpgo.CallToolResult) (*worker.Result, error) {
	out := &worker.Result{IsError: res.IsError}
	for i, c := range res.Content {
		block, err := contentBlock(c)
		if err != nil {
			return nil, fmt.Errorf("content %d of the result: %w", i, err)
		}
		out.Content = append(out.Content, block)
	}
	switch {
	case len(res.RawStructuredContent) > 0 && string(res.RawStructuredContent) != "null":
		out.StructuredContent = messages.JSON(res.RawStructuredContent)
	case res.StructuredContent != nil:
		data, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, fmt.Errorf("structured content: %w", err)
		}
		out.StructuredContent = data
	}
	if len(out.Content) == 0 && out.StructuredContent != nil {
		out.Content = []messages.ContentBlock{messages.JSONBlock(out.StructuredContent)}
	}
	return out, nil
}

// contentBlock maps one MCP content item, with its annotations.
func contentBlock(c mcpgo.Content) (messages.ContentBlock, error) {
	block, err := contentOf(c)
	if err != nil {
		return block, err
	}
	var a *mcpgo.Annotations
	switch v := c.(type) {
	case mcpgo.TextContent:
		a = v.Annotations
	case *mcpgo.TextContent:
		a = v.Annotations
	case mcpgo.ImageContent:
		a = v.Annotations
	case *mcpgo.ImageContent:
		a = v.Annotations
	case mcpgo.AudioContent:
		a = v.Annotations
	case *mcpgo.AudioContent:
		a = v.Annotations
	case mcpgo.ResourceLink:
		a = v.Annotations
	case *mcpgo.ResourceLink:
		a = v.Annotations
	case mcpgo.EmbeddedResource:
		a = v.Annotations
	case *mcpgo.EmbeddedResource:
		a = v.Annotations
	}
	if a != nil && (len(a.Audience) > 0 || a.Priority != nil || a.LastModified != "") {
		block.Annotations = &messages.ContentAnnotations{Priority: a.Priority, LastModified: a.LastModified}
		for _, role := range a.Audience {
			block.Annotations.Audience = append(block.Annotations.Audience, string(role))
		}
	}
	return block, nil
}

func contentOf(c mcpgo.Content) (messages.ContentBlock, error) {
	switch v := c.(type) {
	case *mcpgo.TextContent:
		return contentOf(*v)
	case *mcpgo.ImageContent:
		return contentOf(*v)
	case *mcpgo.AudioContent:
		return contentOf(*v)
	case *mcpgo.ResourceLink:
		return contentOf(*v)
	case *mcpgo.EmbeddedResource:
		return contentOf(*v)
	case mcpgo.TextContent:
		return messages.TextBlock(v.Text), nil
	case mcpgo.ImageContent:
		data, err := base64.StdEncoding.DecodeString(v.Data)
		if err != nil {
			return messages.ContentBlock{}, fmt.Errorf("image data is not base64: %w", err)
		}
		return messages.ImageBlock(data, v.MIMEType), nil
	case mcpgo.AudioContent:
		data, err := base64.StdEncoding.DecodeString(v.Data)
		if err != nil {
			return messages.ContentBlock{}, fmt.Errorf("audio data is not base64: %w", err)
		}
		return messages.ContentBlock{Type: messages.ContentAudio, Data: data, MIMEType: v.MIMEType}, nil
	case mcpgo.ResourceLink:
		return messages.ContentBlock{Type: messages.ContentResourceLink, URI: v.URI, Name: v.Name, Description: v.Description, MIMEType: v.MIMEType}, nil
	case mcpgo.EmbeddedResource:
		switch r := v.Resource.(type) {
		case mcpgo.TextResourceContents:
			return messages.ContentBlock{Type: messages.ContentResource, URI: r.URI, MIMEType: r.MIMEType, Text: r.Text}, nil
		case *mcpgo.TextResourceContents:
			return messages.ContentBlock{Type: messages.ContentResource, URI: r.URI, MIMEType: r.MIMEType, Text: r.Text}, nil
		case mcpgo.BlobResourceContents:
			return blobBlock(r)
		case *mcpgo.BlobResourceContents:
			return blobBlock(*r)
		}
		return messages.ContentBlock{}, fmt.Errorf("embedded resource of unknown kind %T", v.Resource)
	}
	return messages.ContentBlock{}, fmt.Errorf("content of unknown type %T", c)
}

func blobBlock(r mcpgo.BlobResourceContents) (messages.ContentBlock, error) {
	data, err := base64.StdEncoding.DecodeString(r.Blob)
	if err != nil {
		return messages.ContentBlock{}, fmt.Errorf("resource %s: blob is not base64: %w", r.URI, err)
	}
	return messages.ContentBlock{Type: messages.ContentResource, URI: r.URI, MIMEType: r.MIMEType, Data: data}, nil
}

// traceContext is the W3C trace context of the call's span, for the
// request's _meta (traceparent, tracestate), as MCP's OpenTelemetry
// convention carries it, so that the server's spans join the call's
// trace; nil when the call is not traced.
func traceContext(ctx context.Context) map[string]any {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	out := make(map[string]any, len(carrier))
	for k, v := range carrier {
		out[k] = v
	}
	return out
}
