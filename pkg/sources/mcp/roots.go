package mcp

import (
	"context"
	"net/url"
	"path/filepath"

	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// roots answers the server's roots/list requests with Config.Roots. The
// client declares the roots capability only when it has one.
type roots []string

func (r roots) ListRoots(context.Context, mcpgo.ListRootsRequest) (*mcpgo.ListRootsResult, error) {
	out := &mcpgo.ListRootsResult{Roots: make([]mcpgo.Root, 0, len(r))}
	for _, dir := range r {
		uri := url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}
		out.Roots = append(out.Roots, mcpgo.Root{URI: uri.String(), Name: filepath.Base(dir)})
	}
	return out, nil
}
