package messages

// EndpointInfo says which protocol versions the coordinator answers
// (info). It is answered whatever the request's Toolbus-Version, so that a
// client of any version can learn what the server speaks.
const EndpointInfo = "info"

// InfoRequest asks what the coordinator speaks (endpoint info); it has no
// fields, and an empty body is one.
type InfoRequest struct{}

// InfoReply says what the coordinator speaks.
type InfoReply struct {
	// Version is the protocol's major version, ProtocolVersion: the
	// version of the events it stores and of the messages for workers.
	Version string `json:"version"`
	// Versions are the major versions whose requests the API answers,
	// newest first (APIVersions).
	Versions []string `json:"versions"`
	// Coordinator is the coordinator's release.
	Coordinator string `json:"coordinator,omitempty"`
}
