package setup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// claimsUpdateSubject is where the system account's user sends an account
// JWT to the servers' resolver; each server answers.
const claimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"

// ErrNotRunning is returned by Push when no server of the installation
// could be reached: the change is in nats/accounts.conf, which the
// servers load when they start.
var ErrNotRunning = errors.New("no server of the installation could be reached")

// Pushed says which servers took a change.
type Pushed struct {
	// Servers that stored every JWT of the change.
	Servers []string
	// Nodes is how many nodes the installation has.
	Nodes int
}

// Push sends a change's account JWTs to the running servers' resolver as
// the system account's user, and waits (for at most 5 s per JWT) until
// every node has answered. A server that refuses a JWT is an error naming
// the server and why; nodes that do not answer get the change from the
// others' resolvers later.
func (in *Installation) Push(ctx context.Context, change Change) (Pushed, error) {
	return in.PushTo(ctx, in.URLs(), change)
}

// PushTo is Push to the servers at urls (comma-separated).
func (in *Installation) PushTo(ctx context.Context, urls string, change Change) (Pushed, error) {
	out := Pushed{Nodes: len(in.state.Nodes)}
	if len(change.AccountJWTs) == 0 {
		return out, nil
	}
	nc, err := nats.Connect(urls, nats.UserCredentials(in.CredsFile(UserSystem)), nats.Name("toolbus-setup"), nats.Timeout(2*time.Second))
	if err != nil {
		return out, fmt.Errorf("%w (%s): %v", ErrNotRunning, urls, err)
	}
	defer nc.Close()
	took := map[string]int{}
	for _, token := range change.AccountJWTs {
		servers, err := pushOne(ctx, nc, token, len(in.state.Nodes))
		if err != nil {
			return out, err
		}
		for _, s := range servers {
			took[s]++
		}
	}
	for server, n := range took {
		if n == len(change.AccountJWTs) {
			out.Servers = append(out.Servers, server)
		}
	}
	if len(out.Servers) == 0 {
		return out, fmt.Errorf("no server of %s answered the account update", urls)
	}
	return out, nil
}

// claimsReply is a server's answer to a claims update.
type claimsReply struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Data *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

func pushOne(ctx context.Context, nc *nats.Conn, token string, nodes int) ([]string, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(claimsUpdateSubject, inbox, []byte(token)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var servers []string
	for len(servers) < nodes {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // the nodes that did not answer sync from the others
		}
		var r claimsReply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return servers, fmt.Errorf("server's answer to the account update: %q", msg.Data)
		}
		if r.Error != nil {
			return servers, fmt.Errorf("server %s refused the account update: %s", r.Server.Name, r.Error.Description)
		}
		servers = append(servers, r.Server.Name)
	}
	return servers, nil
}
