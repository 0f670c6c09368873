package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"reflect"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"go.yaml.in/yaml/v3"

	"github.com/toolbus/toolbus/pkg/messages"
)

// RequestInfoHeader is the header the NATS server writes on a request that
// crosses a service import shared with share: true. It names the
// requester's account and user, and the server replaces any value the
// client sent, so it cannot be forged.
const RequestInfoHeader = "Nats-Request-Info"

// Identities maps authenticated NATS users to what they may do: the
// agents they may act as and whether they are operators. It is the
// coordinator's identities file:
//
//	users:
//	  fleet-a: {agents: [support-bot, "triage-*"], routes: [Hq5lB0vBvBHVcFsm2lS4oM]}
//	  ops: {operator: true}
type Identities struct {
	Users map[string]UserIdentity `yaml:"users"`
}

// UserIdentity is what one NATS user may do.
type UserIdentity struct {
	// Agents are the agent names the user may act as; an entry may be a
	// pattern ("triage-*", matched as path.Match does).
	Agents []string `yaml:"agents"`
	// Operator users may decide approvals, switch tools, and act as any agent.
	Operator bool `yaml:"operator"`
	// Routes are the routes (messages.RouteNames.Subject) the user's submits
	// may name: those whose results the server lets the user receive
	// (toolbus.results.<route>.> in its permissions). A submit naming
	// another route, or a call ID on another route, is refused.
	Routes []string `yaml:"routes"`
}

// LoadIdentities reads an identities file.
func LoadIdentities(file string) (*Identities, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	ids, err := ParseIdentities(data)
	if err != nil {
		return nil, fmt.Errorf("identities %s: %w", file, err)
	}
	return ids, nil
}

// ParseIdentities reads identities from YAML, refusing unknown fields and
// malformed agent patterns.
func ParseIdentities(data []byte) (*Identities, error) {
	var ids Identities
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&ids); err != nil {
		return nil, err
	}
	if len(ids.Users) == 0 {
		return nil, fmt.Errorf("no users")
	}
	for user, u := range ids.Users {
		if user == "" {
			return nil, fmt.Errorf("a user without a name")
		}
		if !u.Operator && len(u.Agents) == 0 {
			return nil, fmt.Errorf("user %s: neither agents nor operator", user)
		}
		for _, a := range u.Agents {
			if _, err := path.Match(a, ""); err != nil || a == "" {
				return nil, fmt.Errorf("user %s: agent pattern %q is malformed", user, a)
			}
		}
		for _, r := range u.Routes {
			if err := messages.ValidateRoute(r); err != nil {
				return nil, fmt.Errorf("user %s: %w", user, err)
			}
		}
	}
	return &ids, nil
}

// caller is the authenticated requester of an API request.
type caller struct {
	Account string `json:"acc"`
	User    string `json:"user"`
	// JWT is the user's JWT, for a user of an installation whose
	// identities are signed (operator mode): the server writes the JWT it
	// authenticated the connection with.
	JWT string `json:"jwt,omitempty"`
	// IssuerKey is the key that signed the user: its account's, or one of
	// the account's signing keys (claims.go reads the users an auth
	// callout issued by it).
	IssuerKey string `json:"issuer_key,omitempty"`
	// key is the user's public key once User names it by its JWT's name.
	key string
}

func (c *caller) String() string {
	if c.issuedByCallout() {
		// Its name is a JWT of claims not yet checked: the audit names
		// the key that issued the user instead.
		return c.Account + "/(a user of signing key " + c.IssuerKey + ")"
	}
	return c.Account + "/" + c.User
}

// callerOf reads the requester from the server-written request info
// header; nil when there is none (a request from the coordinator's own
// account, or through an import without share), or when there are
// several (the server writes one; a second is the client's, see
// headerShape).
func callerOf(headers map[string][]string) *caller {
	values := headers[RequestInfoHeader]
	if len(values) != 1 {
		return nil
	}
	var c caller
	if err := json.Unmarshal([]byte(values[0]), &c); err != nil || c.User == "" {
		return nil
	}
	return &c
}

// The server removes a Nats-Request-Info line the client wrote only when
// it is one the server itself would parse: at the start of a line that
// follows a CRLF. It then appends its own line as the last of the header
// block. A client that writes its header by hand can hide a line of its
// own from the server behind a bare LF, which the clients' header parsers
// (nats.go's among them) take for a line break as well, and can keep the
// parser from reaching the server's line: behind an earlier blank line,
// or glued to the end of a line of its own. The parsed headers alone
// cannot tell such a block from an honest one, but their size on the wire
// can: headerShape compares it with the size of the parsed headers
// written as clients write them.

// maxHeaderValues is the most header values a request may carry (its
// Content-Type, protocol version, trace context and the server's
// Nats-Request-Info need six). Each value is a line whose CR and space a
// hand-written block may leave out, two bytes a hidden line could use;
// with at most this many lines they do not add up to the smallest line
// the server writes (lostRequestInfoMin).
const maxHeaderValues = 10

// lostRequestInfoMin is the fewest bytes the server's Nats-Request-Info
// line takes where a parser skips it: after the first blank line it is
// the line with an empty value ({}), its CRLF and the block's closing
// CRLF; glued to a line that begins with ':' (which the parser skips) it
// is that ':', the line and its CRLF.
const lostRequestInfoMin = len(":") + len(RequestInfoHeader) + len(": {}") + len("\r\n")

// headerShape refuses a request whose header block may hold bytes its
// parsed headers do not show, where a Nats-Request-Info the client wrote
// could pass for the server's. size is the block's size on the wire,
// negative when unknown. A block written as clients write it ("NATS/1.0",
// then "Key: value" lines, each ending in CRLF, then a blank line) has
// exactly the size of its parsed headers written again; a hand-written
// one may be a little shorter, never longer.
func headerShape(headers map[string][]string, size int) error {
	if size < 0 {
		return forbidden("the request's header size cannot be read, so the identity in its %s cannot be trusted", RequestInfoHeader)
	}
	if len(headers) == 0 && size == 0 {
		return nil
	}
	if _, ok := headers["Status"]; ok {
		return forbidden("a request's header block may not carry a status")
	}
	written, values := len("NATS/1.0\r\n")+len("\r\n"), 0
	for key, vs := range headers {
		info := key == RequestInfoHeader
		if !info && strings.Contains(strings.ToLower(key), "nats-request-info") {
			return forbidden("header %q looks like the server's %s", key, RequestInfoHeader)
		}
		for _, v := range vs {
			if strings.Contains(strings.ToLower(v), "nats-request-info") {
				return forbidden("header %s holds the name of the server's %s", key, RequestInfoHeader)
			}
			written += len(key) + len(": ") + len(v) + len("\r\n")
			values++
		}
	}
	if values > maxHeaderValues {
		return forbidden("the request carries %d header values; at most %d", values, maxHeaderValues)
	}
	// Each line may have lost its CR and the space after its colon, and
	// the status and blank lines their CR: what is left unshown is at most
	// the extra size and those bytes.
	if unshown := size - written + 2*values + 2; unshown >= lostRequestInfoMin {
		return forbidden("the request's header block is %d bytes, its headers %d: it may hide a %s line", size, written, RequestInfoHeader)
	}
	if len(headers[RequestInfoHeader]) > 1 {
		return forbidden("the request carries %d %s headers; the server writes one", len(headers[RequestInfoHeader]), RequestInfoHeader)
	}
	return nil
}

// wireHeaderSize is the size of a request's header block as it arrived:
// the message's size on the wire, less its subject, reply and body. micro
// does not show the message, nor nats.go its size but through an
// unexported field, which is read here; -1 when either library no longer
// has it (then headerShape refuses every request, and the tests say so).
func wireHeaderSize(mr micro.Request) int {
	v := reflect.ValueOf(mr)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return -1
	}
	msg := v.Elem().FieldByName("msg")
	if !msg.IsValid() || msg.Type() != reflect.TypeFor[*nats.Msg]() || msg.IsNil() {
		return -1
	}
	wsz := msg.Elem().FieldByName("wsz")
	if !wsz.IsValid() || !wsz.CanInt() || wsz.Int() <= 0 {
		return -1
	}
	size := int(wsz.Int()) - len(mr.Subject()) - len(mr.Reply()) - len(mr.Data())
	if size < 0 {
		return -1
	}
	return size
}

// identity is the caller of one request as the identities file knows it.
type identity struct {
	caller *caller
	user   UserIdentity
	// refused audits a refusal of mayActFor, once admitted.
	refused func(agent string, err error)
}

// identify finds the caller's entry; a caller the file does not name is refused.
func (ids *Identities) identify(c *caller) (*identity, error) {
	if c == nil {
		return nil, forbidden("the request carries no authenticated identity: connect as a user of the agents' account, whose import of the API shares the requester's identity")
	}
	if ids == nil {
		return nil, errNoIdentities
	}
	u, ok := ids.Users[c.User]
	if !ok {
		return nil, forbidden("user %s has no identity in the coordinator's identities", c.User)
	}
	return &identity{caller: c, user: u}, nil
}

// identify finds what the caller may do: from the signed claims of its
// user's JWT when they say (claims.go), else from the identities file.
func (g *guard) identify(c *caller) (*identity, error) {
	if c != nil && (c.JWT != "" || c.issuedByCallout()) {
		u, name, err := g.claims.identity(c, g.prefix)
		if err != nil {
			return nil, err
		}
		if u != nil {
			named := *c
			named.key, named.User = c.User, name
			if c.JWT == "" {
				named.key = ""
			}
			return &identity{caller: &named, user: *u}, nil
		}
	}
	return g.ids.identify(c)
}

func forbidden(format string, args ...any) *messages.Error {
	return messages.Errorf(messages.CodeForbidden, format, args...)
}

// mayActAs tells whether the identity may act as agent.
func (id *identity) mayActAs(agent string) bool {
	if id.user.Operator {
		return true
	}
	return slices.ContainsFunc(id.user.Agents, func(pattern string) bool {
		ok, _ := path.Match(pattern, agent)
		return ok
	})
}

// onlyAgent is the one agent the identity acts as, if it has exactly one
// that is not a pattern.
func (id *identity) onlyAgent() string {
	if len(id.user.Agents) == 1 && !hasMeta(id.user.Agents[0]) {
		return id.user.Agents[0]
	}
	return ""
}

func hasMeta(pattern string) bool {
	return slices.ContainsFunc([]byte(pattern), func(b byte) bool { return b == '*' || b == '?' || b == '[' || b == '\\' })
}

// agent checks the agent a request names, filling in the caller's only
// agent when it names none.
func (id *identity) agent(agent *string) error {
	if *agent == "" {
		*agent = id.onlyAgent()
		return nil
	}
	if !id.mayActAs(*agent) {
		return forbidden("user %s may not act as agent %s", id.caller.User, *agent)
	}
	return nil
}

// agentInTurn is agent for a request that may name a turn: a turn
// belongs to an agent, and a request in it that names none would read and
// change it whoever's it is, so a user that serves several agents names
// the one it acts as (operators, who may act as any, need not).
func (id *identity) agentInTurn(agent *string, turn string) error {
	if err := id.agent(agent); err != nil {
		return err
	}
	if *agent == "" && turn != "" && !id.user.Operator {
		return messages.Errorf(messages.CodeBadRequest, "name the agent: user %s acts as several, and turn %s is one agent's", id.caller.User, turn)
	}
	return nil
}

// by checks who a request says acts: the caller's own user name or an
// agent it may act as. Empty, it becomes the caller's only agent, or its
// user name.
func (id *identity) by(by *string) error {
	if *by == "" {
		if *by = id.onlyAgent(); *by == "" || id.user.Operator {
			*by = id.caller.User
		}
		return nil
	}
	if *by != id.caller.User && !id.mayActAs(*by) {
		return forbidden("user %s may not act as %s", id.caller.User, *by)
	}
	return nil
}

func (id *identity) operator(endpoint string) error {
	if !id.user.Operator {
		return forbidden("%s is for operators; user %s is not one", endpoint, id.caller.User)
	}
	return nil
}

// authorize checks one decoded request of endpoint against the caller's
// identity, and fills in the agent or by it leaves empty. It is the one
// place that ties requests to authenticated callers; checks that need
// stored data (whose approval an answer is for) use the identity on the
// context (see mayActFor).
func (id *identity) authorize(endpoint string, req any) error {
	switch r := req.(type) {
	case *messages.SubmitRequest:
		return id.submit(r)
	case *messages.ListToolsRequest:
		return id.agentInTurn(&r.Agent, r.Turn)
	case *messages.ActivateRequest:
		return id.agentInTurn(&r.Agent, r.Turn)
	case *messages.DiscoverRequest:
		return id.agentInTurn(&r.Agent, r.Turn)
	case *messages.ListApprovalsRequest:
		if r.Agent == "" && id.user.Operator {
			return nil // operators list every agent's approvals
		}
		return id.agent(&r.Agent)
	case *messages.CancelRequest:
		return id.by(&r.By)
	case *messages.DecideRequest:
		if endpoint == messages.EndpointApprovalsAnswer {
			// The answer's by is the person in the agent's conversation;
			// approvals.answer checks that the approval is the caller's
			// agent's (mayActFor).
			if r.By == "" {
				return id.by(&r.By)
			}
			return nil
		}
		if err := id.operator(endpoint); err != nil {
			return err
		}
		return id.by(&r.By)
	case *messages.ToolSwitchRequest:
		if err := id.operator(endpoint); err != nil {
			return err
		}
		return id.by(&r.By)
	case *messages.LearningStatusRequest:
		// Learned terms are the words of every agent's queries.
		return id.operator(endpoint)
	case *messages.LearningSwitchRequest:
		if err := id.operator(endpoint); err != nil {
			return err
		}
		return id.by(&r.By)
	case *messages.LearningResetRequest:
		if err := id.operator(endpoint); err != nil {
			return err
		}
		return id.by(&r.By)
	}
	return nil
}

// submit checks a submit's agent, and binds its route to the user: a
// result routed elsewhere would reach whoever may receive that route. A
// notify copy is published in the coordinator's account, which the agents'
// account does not import, so with identities it reaches no agent and is
// refused. A user of several agents names the agent: a call without one is
// readable by operators only.
func (id *identity) submit(r *messages.SubmitRequest) error {
	if err := id.agent(&r.Agent); err != nil {
		return err
	}
	if r.Agent == "" && !id.user.Operator {
		return messages.Errorf(messages.CodeBadRequest, "name the agent: user %s acts as several", id.caller.User)
	}
	route := r.Route
	if route == "" && len(r.CallID) == 2*messages.RouteLength {
		route = r.CallID[:messages.RouteLength]
	}
	if route != "" && !slices.Contains(id.user.Routes, route) {
		return forbidden("user %s may not receive results on route %s", id.caller.User, route)
	}
	if r.Notify != "" {
		return forbidden("notify is not delivered across accounts: follow the call with calls.get or calls.events, or on a route of user %s", id.caller.User)
	}
	return nil
}

// auditForbidden is the audit decision of a request refused because its
// caller may not act as the agent it names, or is not an operator.
const auditForbidden = "forbidden"

type identityKey struct{}

// mayActFor refuses with forbidden when the request's authenticated
// caller may not act as agent; without identities every caller may. The
// refusal does not name the agent, which may come from stored data (whose
// approval an answer is for) the caller may not learn; the audit record
// does.
func mayActFor(ctx context.Context, agent string) error {
	id, _ := ctx.Value(identityKey{}).(*identity)
	if id == nil || id.mayActAs(agent) {
		return nil
	}
	err := forbidden("user %s may not act for the agent this concerns", id.caller.User)
	if id.refused != nil {
		id.refused(agent, err)
	}
	return err
}

// identityOf is the authenticated caller of the request ctx belongs to;
// nil without identities.
func identityOf(ctx context.Context) *identity {
	id, _ := ctx.Value(identityKey{}).(*identity)
	return id
}

// mayRead refuses with forbidden, and audits, a read of what (a call, a
// turn) that belongs to an agent the caller may not act as; without
// identities everyone may read everything. The refusal names neither the
// owner nor anything of its state.
func mayRead(ctx context.Context, what, agent string) error {
	id := identityOf(ctx)
	if id == nil || id.mayActAs(agent) {
		return nil
	}
	err := forbidden("%s is not of an agent user %s may act as", what, id.caller.User)
	if id.refused != nil {
		id.refused(agent, err)
	}
	return err
}

// mayReadQuietly tells whether the caller may read what belongs to agent,
// for lists that leave out what is not the caller's.
func mayReadQuietly(ctx context.Context, agent string) bool {
	id := identityOf(ctx)
	return id == nil || id.mayActAs(agent)
}

// guard applies Identities and the users' signed claims to the API's
// requests, and audits refusals.
type guard struct {
	ids   *Identities
	audit func(rec *messages.AuditRecord)
	// prefix is the installation's subject prefix, where the routes of a
	// user's claims are read.
	prefix string
	claims claimsCache
}

// errNoIdentities refuses a request that crossed an account import (it
// carries Nats-Request-Info) when the coordinator has no identities file
// and the user's JWT carries no Toolbus claims: such a deployment
// authenticates its agents' users, and a coordinator that forgot
// --identities must not trust the agent a request names.
var errNoIdentities = forbidden("the coordinator has no identities file and the user carries no signed Toolbus claims: a request from another account is refused, since the agent it names cannot be checked; issue the user with toolbus agent add, or start the coordinator with --identities (Config.Identities)")

// admitRequest is admit for a request as it arrived: it first refuses a
// header block that may hide what the server wrote (headerShape).
func (g *guard) admitRequest(ctx context.Context, endpoint string, mr micro.Request, req any) (context.Context, error) {
	if g == nil {
		return ctx, nil
	}
	if err := g.fromAClient(endpoint, mr, req); err != nil {
		return ctx, err
	}
	return g.admit(ctx, endpoint, mr.Headers(), req)
}

// fromAClient refuses, and audits, a request whose header block may hide
// what the server wrote (headerShape), or that a stream delivered
// (deliveredByAClient).
func (g *guard) fromAClient(endpoint string, mr micro.Request, req any) error {
	headers := mr.Headers()
	err := headerShape(headers, wireHeaderSize(mr))
	if err == nil {
		err = deliveredByAClient(mr.Reply(), headers)
	}
	if err != nil && g != nil {
		// Such a block may hold a request info of the sender's own
		// writing, naming anyone: the refusal is recorded without a by
		// rather than in another user's name.
		g.refused(endpoint, nil, req, err)
	}
	return err
}

// deliveredByAClient refuses a request that a stream sent, with the
// headers someone stored in it. A user of the coordinator's account that
// may create a consumer, or ask for a stored message by direct get, names
// where the stream sends the message, an API subject included, and the
// stream keeps the headers it was written with (a Nats-Request-Info
// hidden from the server among them). A consumer's delivery has the reply
// $JS.ACK.… and a direct get's answer none; a request that crossed an
// import has the reply the server made for it (_R_.…, _GR_.… across a
// gateway), whatever its client asked for.
func deliveredByAClient(reply string, headers map[string][]string) error {
	if strings.HasPrefix(reply, "$JS.") {
		return forbidden("the request was delivered by a stream (reply %s), not sent by a client", reply)
	}
	if _, crossed := headers[RequestInfoHeader]; crossed && !strings.HasPrefix(reply, "_R_.") && !strings.HasPrefix(reply, "_GR_.") {
		return forbidden("the request carries %s but no reply the server made for an import: it was not sent through one", RequestInfoHeader)
	}
	return nil
}

// admit identifies the caller of a request and checks the decoded request
// req (nil before it is decoded); the returned context carries the
// identity for checks further down. Without identities it admits
// unchanged every request without Nats-Request-Info (one account, as
// toolbus dev), and refuses the others. It trusts the headers it is given
// (see admitRequest).
func (g *guard) admit(ctx context.Context, endpoint string, headers map[string][]string, req any) (context.Context, error) {
	if g == nil {
		return ctx, nil
	}
	c := callerOf(headers)
	if g.ids == nil {
		if _, crossed := headers[RequestInfoHeader]; !crossed {
			return ctx, nil
		}
		if c == nil || (c.JWT == "" && !c.issuedByCallout()) {
			g.refused(endpoint, c, req, errNoIdentities)
			return ctx, errNoIdentities
		}
	}
	id, err := g.identify(c)
	if err == nil {
		c = id.caller
		err = id.authorize(endpoint, req)
	}
	if errors.Is(err, messages.ErrForbidden) {
		g.refused(endpoint, c, req, err)
	}
	if err != nil {
		return ctx, err
	}
	id.refused = func(agent string, err error) {
		g.refused(endpoint, c, &messages.ListApprovalsRequest{Agent: agent}, err)
	}
	return context.WithValue(ctx, identityKey{}, id), nil
}

// refused audits a forbidden request.
func (g *guard) refused(endpoint string, c *caller, req any, err error) {
	if g.audit == nil {
		return
	}
	rec := &messages.AuditRecord{Decision: auditForbidden, Reason: endpoint + ": " + err.Error()}
	if c != nil {
		rec.By = c.String()
	}
	switch r := req.(type) {
	case *messages.SubmitRequest:
		rec.Tool, rec.Agent, rec.Turn = r.Tool, r.Agent, r.Turn
	case *messages.ListToolsRequest:
		rec.Agent = r.Agent
	case *messages.ActivateRequest:
		rec.Agent, rec.Turn = r.Agent, r.Turn
	case *messages.DiscoverRequest:
		rec.Agent = r.Agent
	case *messages.ListApprovalsRequest:
		rec.Agent = r.Agent
	}
	g.audit(rec)
}
