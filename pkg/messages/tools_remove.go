package messages

// EndpointToolsRemove removes tools from the catalog (tools.remove): one
// tool, or every tool of a namespace. It takes a ToolSwitchRequest and is
// for operators. A removed tool that a live worker still serves comes back
// when that worker starts again or its source's tool list changes.
const EndpointToolsRemove = "tools.remove"

// RemoveToolsReply lists the tools tools.remove took out of the catalog.
type RemoveToolsReply struct {
	Removed []string `json:"removed"`
}
