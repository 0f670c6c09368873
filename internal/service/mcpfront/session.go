package mcpfront

import (
	"errors"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/server"
	"github.com/nats-io/nuid"

	"github.com/toolbus/toolbus/pkg/messages"
)

// errSessionID is the error of a session ID that no front issued.
var errSessionID = errors.New("not a Toolbus MCP session ID")

// sessionResolver names HTTP sessions. A session's ID is "<random>.<turn>":
// the turn is read back from the ID by whichever front the session's next
// request reaches, and the turn's state lives with the coordinator, so no
// front keeps anything about a session. The random part keeps two sessions
// of one turn apart; it ends with elicitsMark when the client declared the
// elicitation capability, the one capability of the client's that the
// front uses. A turn belongs to the first agent that names it, so an ID
// presented with another agent's token gets that agent nothing of the
// turn: the coordinator refuses it.
type sessionResolver struct{}

// elicitsMark ends the random part of the ID of a session whose client
// declared the elicitation capability.
const elicitsMark = "-e"

// elicitsKey marks the context of an initialize request whose client
// declared the elicitation capability.
type elicitsKey struct{}

func (sessionResolver) ResolveSessionIdManager(r *http.Request) server.SessionIdManager {
	m := sessionIDs{}
	if r != nil {
		m.turn = r.Header.Get(TurnHeader)
		m.elicits, _ = r.Context().Value(elicitsKey{}).(bool)
	}
	return m
}

// sessionIDs issues a session ID for the turn an initialize request named
// in its Toolbus-Turn header, or for a new turn.
type sessionIDs struct {
	turn    string
	elicits bool
}

func (m sessionIDs) Generate() string {
	turn := m.turn
	if messages.ValidateID("turn", turn) != nil {
		turn = newTurn()
	}
	if m.elicits {
		return nuid.Next() + elicitsMark + "." + turn
	}
	return nuid.Next() + "." + turn
}

func (sessionIDs) Validate(sessionID string) (bool, error) {
	if _, ok := turnOfSession(sessionID); !ok {
		return false, errSessionID
	}
	return false, nil
}

// Terminate accepts a DELETE; the turn stays with the coordinator, and an
// ID is valid for as long as its turn is kept.
func (sessionIDs) Terminate(string) (bool, error) { return false, nil }

func turnOfSession(sessionID string) (string, bool) {
	turn, _, ok := parseSession(sessionID)
	return turn, ok
}

// parseSession reads a session ID: its turn, and whether its client
// declared the elicitation capability.
func parseSession(sessionID string) (turn string, elicits bool, ok bool) {
	random, turn, ok := strings.Cut(sessionID, ".")
	random, elicits = strings.CutSuffix(random, elicitsMark)
	if !ok || len(random) != 22 || messages.ValidateID("session", random) != nil || messages.ValidateID("turn", turn) != nil {
		return "", false, false
	}
	return turn, elicits, true
}
