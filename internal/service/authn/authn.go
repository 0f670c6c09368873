// Package authn is Toolbus's NATS auth callout (toolbus authn): a client
// connects with an OpenID Connect token as its connection's token, the
// server asks the callout who it is ($SYS.REQ.USER.AUTH, the server's auth
// callout protocol), and the callout checks the token against the issuer's
// keys (its issuer, audience and expiry) and answers with a short-lived
// user of the agents' account whose claims come from the token: the agents
// it may act as from one claim, and whether it is an operator from another.
// A token it cannot check is refused at once with the reason; the server
// refuses the connection.
//
// The user it issues is signed by a scoped signing key of the agents'
// account (internal/service/setup, oidc.go), whose scope fixes its permissions to
// an agent's: it may publish the API, and subscribe to its own inbox
// (messages.TokenInbox of the token's issuer and subject), nothing else.
// Its name is a JWT of its Toolbus claims signed with the same key, which
// the coordinator reads from the server's Nats-Request-Info
// (internal/service/coordinator, claims.go): the server keeps no JWT of a user a
// callout issued.
package authn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/support/oidc"
	"github.com/toolbus/toolbus/pkg/messages"
)

// Defaults of Config.
const (
	DefaultMaxTTL  = time.Hour
	DefaultWorkers = 8
	DefaultQueue   = 256
	// DefaultCheckTimeout bounds the check of one token, a fetch of the
	// issuer's keys included: below the server's authorization timeout
	// (2 s), so that a refusal reaches the server before it gives up.
	DefaultCheckTimeout = 1500 * time.Millisecond
)

// Limits of a token's claims.
const (
	// maxPatterns is the most agent patterns a token may name.
	maxPatterns = 64
	// maxSubject is the longest subject a token may have.
	maxSubject = 255
)

// UserPrefix begins the name of every user the callout issues.
const UserPrefix = "oidc:"

// InboxTag is the tag of the user's JWT that names its inbox, which its
// scope lets it subscribe to: "inbox:" and messages.TokenInboxID.
const InboxTag = "inbox:"

// Config configures the callout.
type Config struct {
	// Conn is a connection as the callout's user of the callout account,
	// one of the account's auth users. Required.
	Conn *nats.Conn
	// Verifier checks the tokens. Required.
	Verifier *oidc.Verifier
	// AgentsAccount is the public key of the account the users are
	// issued in. Required.
	AgentsAccount string
	// UserKey is the agents' account's scoped signing key, which signs the
	// users; AnswerKey the callout account's key, which signs the answers.
	// Required.
	UserKey   nkeys.KeyPair
	AnswerKey nkeys.KeyPair
	// AgentsClaim names the claim listing the agents a token's user may
	// act as. Required.
	AgentsClaim string
	// OperatorsClaim, when set, names the claim that makes the user an
	// operator: true, or with OperatorsValue a value or a list holding it.
	OperatorsClaim string
	OperatorsValue string
	// MaxTTL bounds how long a user lasts: it expires with its token, or
	// MaxTTL after it was issued if that comes first. Default 1 h.
	MaxTTL time.Duration
	// Workers check tokens at once; Queue requests wait for one, beyond
	// which a request is refused at once. Defaults 8 and 256.
	Workers int
	Queue   int
	// CheckTimeout bounds one request's check. Default 1.5 s.
	CheckTimeout time.Duration
	// Logger defaults to slog.Default(). Refusals are logged with their
	// reason, at most LogLinesPerSecond (default 10) lines a second: a
	// flood of connections does not flood the log.
	Logger            *slog.Logger
	LogLinesPerSecond int
}

// Stats count what the callout answered: users issued, tokens refused,
// requests refused at once because Queue requests were waiting, and
// requests left unanswered because the server had given up on them.
type Stats struct {
	Issued, Refused, Busy, Late int64
}

// Callout is a running callout.
type Callout struct {
	cfg      Config
	log      *slog.Logger
	sub      *nats.Subscription
	queue    chan *nats.Msg
	wg       sync.WaitGroup
	ctx      context.Context
	cancel   context.CancelFunc
	userKey  string
	logLimit logLimiter

	issued, refused, busy, late atomic.Int64
}

// Start subscribes to the server's authorization requests, in the queue
// group toolbus-authn (run as many callouts as the load needs).
func Start(cfg Config) (*Callout, error) {
	switch {
	case cfg.Conn == nil || cfg.Verifier == nil:
		return nil, errors.New("authn: a connection and a verifier are required")
	case !nkeys.IsValidPublicAccountKey(cfg.AgentsAccount):
		return nil, fmt.Errorf("authn: %q is not an account's public key", cfg.AgentsAccount)
	case cfg.UserKey == nil || cfg.AnswerKey == nil:
		return nil, errors.New("authn: the users' and the answers' signing keys are required")
	case cfg.AgentsClaim == "":
		return nil, errors.New("authn: the agents claim is required")
	case cfg.OperatorsValue != "" && cfg.OperatorsClaim == "":
		return nil, errors.New("authn: an operators value needs the operators claim")
	}
	userKey, err := cfg.UserKey.PublicKey()
	if err != nil || !nkeys.IsValidPublicAccountKey(userKey) {
		return nil, fmt.Errorf("authn: the users' signing key is not an account signing key: %v", err)
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = DefaultCheckTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LogLinesPerSecond <= 0 {
		cfg.LogLinesPerSecond = 10
	}
	c := &Callout{cfg: cfg, log: cfg.Logger, queue: make(chan *nats.Msg, cfg.Queue), userKey: userKey}
	c.logLimit.perSecond = cfg.LogLinesPerSecond
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for range cfg.Workers {
		c.wg.Go(c.work)
	}
	c.sub, err = cfg.Conn.QueueSubscribe("$SYS.REQ.USER.AUTH", "toolbus-authn", c.enqueue)
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("authn: subscribe to the server's authorization requests: %w", err)
	}
	if err := cfg.Conn.Flush(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("authn: %w", err)
	}
	return c, nil
}

// Stop stops answering; requests not yet answered are left to the
// server's timeout.
func (c *Callout) Stop() {
	if c.sub != nil {
		_ = c.sub.Unsubscribe()
	}
	c.cancel()
	c.wg.Wait()
}

// Stats are the counts of answers so far.
func (c *Callout) Stats() Stats {
	return Stats{Issued: c.issued.Load(), Refused: c.refused.Load(), Busy: c.busy.Load(), Late: c.late.Load()}
}

// enqueue hands a request to a worker; with Queue requests waiting it
// refuses it at once, so that a flood of connections is answered as fast
// as it comes and never grows without bound.
func (c *Callout) enqueue(m *nats.Msg) {
	select {
	case c.queue <- m:
	default:
		c.busy.Add(1)
		c.answer(m, nil, "", "the auth callout is busy: too many connections are being authenticated; try again")
	}
}

func (c *Callout) work() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case m := <-c.queue:
			c.serve(m)
		}
	}
}

// serve answers one request.
func (c *Callout) serve(m *nats.Msg) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		// Not the server's: nothing to answer.
		c.logLimit.log(c.log, "authorization request that cannot be read", "error", err)
		return
	}
	// The server waits for an answer until the request expires (its
	// authorization timeout, written in whole seconds, so it may wait up
	// to a second more): a request it gave up on is not checked.
	deadline := time.Unix(req.Expires, 0)
	if req.Expires != 0 && time.Now().After(deadline.Add(time.Second)) {
		c.late.Add(1)
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.CheckTimeout)
	defer cancel()
	if req.Expires != 0 {
		var cancelAt context.CancelFunc
		ctx, cancelAt = context.WithDeadline(ctx, deadline.Add(500*time.Millisecond))
		defer cancelAt()
	}
	user, err := c.issue(ctx, req)
	if err != nil {
		c.refused.Add(1)
		c.logLimit.log(c.log, "connection refused", "host", req.ClientInformation.Host, "client", req.ClientInformation.Name, "reason", err.Error())
		c.answer(m, req, "", err.Error())
		return
	}
	c.issued.Add(1)
	c.answer(m, req, user, "")
}

// issue checks the request's token and signs the user it stands for.
func (c *Callout) issue(ctx context.Context, req *jwt.AuthorizationRequestClaims) (string, error) {
	token := req.ConnectOptions.Token
	if token == "" {
		return "", errors.New("no token: connect with an OpenID Connect token of the identity provider as the connection's token")
	}
	tok, err := c.cfg.Verifier.Verify(ctx, token)
	if err != nil {
		return "", err
	}
	if !tok.Expiry.After(time.Now()) {
		// Within the verifier's leeway for clocks, but a user that
		// expired already is refused by the server without a reason.
		return "", fmt.Errorf("%w: it expired at %s", oidc.ErrInvalid, tok.Expiry.UTC().Format(time.RFC3339))
	}
	if len(tok.Subject) > maxSubject || strings.IndexFunc(tok.Subject, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("the token's subject is longer than %d characters or holds control characters", maxSubject)
	}
	patterns, _, err := tok.Strings(c.cfg.AgentsClaim)
	if err != nil {
		return "", err
	}
	if len(patterns) > maxPatterns {
		return "", fmt.Errorf("claim %s names %d agents; at most %d", c.cfg.AgentsClaim, len(patterns), maxPatterns)
	}
	var tags jwt.TagList
	for _, p := range patterns {
		// One pattern the coordinator could not use refuses the token
		// whole: a part of its claims could grant what its issuer did not
		// mean to.
		if err := messages.ValidateAgentPattern(p); err != nil {
			return "", fmt.Errorf("claim %s: %w", c.cfg.AgentsClaim, err)
		}
		tags = append(tags, messages.ClaimTagAgent+p)
	}
	operator := false
	if c.cfg.OperatorsClaim != "" {
		if operator, err = tok.Holds(c.cfg.OperatorsClaim, c.cfg.OperatorsValue); err != nil {
			return "", err
		}
	}
	if operator {
		tags = append(tags, messages.ClaimTagOperator)
	}
	if len(tags) == 0 {
		what := "claim " + c.cfg.AgentsClaim + " names no agent"
		if c.cfg.OperatorsClaim != "" {
			what += " and claim " + c.cfg.OperatorsClaim + " makes it no operator"
		}
		return "", fmt.Errorf("the token grants nothing: %s", what)
	}
	expires := time.Now().Add(c.cfg.MaxTTL)
	if tok.Expiry.Before(expires) {
		expires = tok.Expiry
	}
	// The claims the coordinator reads, signed by the key that signs the
	// user, are the user's name.
	claims := jwt.NewUserClaims(req.UserNkey)
	claims.Name = UserPrefix + tok.Subject
	claims.IssuerAccount = c.cfg.AgentsAccount
	claims.Tags = tags
	claims.Expires = expires.Unix()
	name, err := claims.Encode(c.cfg.UserKey)
	if err != nil {
		return "", fmt.Errorf("sign the user's claims: %v", err)
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = name
	uc.IssuerAccount = c.cfg.AgentsAccount
	uc.Tags = append(jwt.TagList{InboxTag + messages.TokenInboxID(tok.Issuer, tok.Subject)}, tags...)
	uc.Expires = expires.Unix()
	// The scope of the signing key sets the permissions: a scoped user
	// carries none of its own.
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	user, err := uc.Encode(c.cfg.UserKey)
	if err != nil {
		return "", fmt.Errorf("sign the user: %v", err)
	}
	c.log.Debug("user issued", "name", claims.Name, "agents", patterns, "operator", operator, "expires", expires.UTC().Format(time.RFC3339), "host", req.ClientInformation.Host)
	return user, nil
}

// answer signs the answer to a request: the user, or the reason it is
// refused. A request that cannot be read gets no answer.
func (c *Callout) answer(m *nats.Msg, req *jwt.AuthorizationRequestClaims, user, refusal string) {
	if req == nil {
		var err error
		if req, err = jwt.DecodeAuthorizationRequestClaims(string(m.Data)); err != nil {
			return
		}
	}
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	resp.Jwt = user
	resp.Error = refusal
	token, err := resp.Encode(c.cfg.AnswerKey)
	if err != nil {
		c.log.Warn("answer not signed", "error", err)
		return
	}
	if err := m.Respond([]byte(token)); err != nil {
		c.logLimit.log(c.log, "answer not sent", "error", err)
	}
}

// logLimiter logs at most a few lines a second, so that a flood of
// refused connections does not flood the log; it counts what it left out.
type logLimiter struct {
	perSecond int

	mu      sync.Mutex
	second  int64
	logged  int
	dropped int
}

func (l *logLimiter) log(log *slog.Logger, msg string, args ...any) {
	now := time.Now().Unix()
	l.mu.Lock()
	if now != l.second {
		if l.dropped > 0 {
			log.Info("log lines left out", "count", l.dropped)
		}
		l.second, l.logged, l.dropped = now, 0, 0
	}
	if l.logged >= l.perSecond {
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.logged++
	l.mu.Unlock()
	log.Info(msg, args...)
}
