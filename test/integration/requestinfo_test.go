package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/coordinator"
	"github.com/toolbus/toolbus/internal/demo"
	"github.com/toolbus/toolbus/internal/natsserver"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/pkg/worker"
)

// rawAPIRequest sends one API request over a connection of its own that
// speaks the NATS protocol by hand, as user, with the header block
// exactly as given, and returns the reply's status code (its
// Nats-Service-Error-Code, "" for success) and body.
func rawAPIRequest(t *testing.T, serverURL, user, endpoint, header, body string) (code, reply string) {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("server greeting %q: %v", line, err)
	}
	inbox := "_INBOX_" + user + ".raw"
	fmt.Fprintf(conn, "CONNECT {\"user\":%q,\"pass\":%q,\"headers\":true,\"verbose\":false,\"protocol\":1}\r\nSUB %s 1\r\n", user, deployPassword(user), inbox)
	fmt.Fprintf(conn, "HPUB toolbus.api.%s %s %d %d\r\n%s%s\r\n", endpoint, inbox, len(header), len(header)+len(body), header, body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no reply to %s: %v", endpoint, err)
		}
		if strings.HasPrefix(line, "-ERR") {
			t.Fatalf("the server refused the raw request: %s", line)
		}
		if !strings.HasPrefix(line, "HMSG ") {
			continue // INFO, PING and the like
		}
		fields := strings.Fields(line)
		hdrLen, err1 := strconv.Atoi(fields[len(fields)-2])
		total, err2 := strconv.Atoi(fields[len(fields)-1])
		if err1 != nil || err2 != nil {
			t.Fatalf("reply line %q", line)
		}
		msg := make([]byte, total+2)
		if _, err := io.ReadFull(r, msg); err != nil {
			t.Fatal(err)
		}
		for _, h := range strings.Split(string(msg[:hdrLen]), "\r\n") {
			if v, ok := strings.CutPrefix(h, "Nats-Service-Error-Code: "); ok {
				code = v
			}
		}
		return code, string(msg[hdrLen:total])
	}
}

// forgedHeaders are header blocks that each carry a Nats-Request-Info
// naming user, written so that the server, which removes a client's
// Nats-Request-Info line only when a CRLF precedes it and appends its own
// as the block's last line, leaves the forged line in place, and a parser
// that also takes a bare LF for a line break (nats.go's does) reads it.
func forgedHeaders(user string) map[string]string {
	info := `Nats-Request-Info: {"acc":"AGENTS","user":"` + user + `"}`
	return map[string]string{
		"after a CRLF, as a client library writes it": "NATS/1.0\r\n" + info + "\r\nContent-Type: application/json\r\n\r\n",
		"after a bare LF, next to the server's":       "NATS/1.0\n" + info + "\r\nContent-Type: application/json\r\n\r\n",
		"before a blank line that hides the server's": "NATS/1.0\r\nContent-Type: application/json\n" + info + "\n\nx\r\n\r\n",
		"with the server's glued to a line's value":   "NATS/1.0\r\nContent-Type: application/json\n" + info + "\r\nX: yy",
		"with the server's glued to a skipped line":   "NATS/1.0\r\nContent-Type: application/json\n" + info + "\r\n:yy",
	}
}

// TestHandWrittenRequestInfoIsRefused: on the deploy configuration, agent
// A's user writes its request headers by hand, with a Nats-Request-Info
// naming B's user (or the operator) in every form that escapes the
// server's replacement. Each request is refused with forbidden, while
// the same request with an honest header block is answered: A cannot
// pass for another user, list B's tools, or read what is for operators;
// each refusal is audited.
func TestHandWrittenRequestInfoIsRefused(t *testing.T) {
	t.Parallel()
	srv, as := identityDeploy(t)
	const honest = "NATS/1.0\r\nContent-Type: application/json\r\n\r\n"
	// Hand-written but honest: answered, so the refusals below are the
	// forgeries'. The demo worker registers its tools on its own time.
	eventually(t, "an honest hand-written request answered with the demo tools", func() bool {
		code, reply := rawAPIRequest(t, srv.URL(), "agent_a", "tools.list", honest, `{"agent":"support-bot"}`)
		if code != "" {
			t.Fatalf("an honest hand-written request: %s %s", code, reply)
		}
		return strings.Contains(reply, "demo-echo")
	})
	if code, reply := rawAPIRequest(t, srv.URL(), "agent_a", "tools.list", "NATS/1.0\nContent-Type:application/json\r\n\r\n", `{"agent":"support-bot"}`); code != "" || !strings.Contains(reply, "demo-echo") {
		t.Fatalf("an honest request written tightly: %s %s", code, reply)
	}
	for how, header := range forgedHeaders("agent_b") {
		if code, reply := rawAPIRequest(t, srv.URL(), "agent_a", "tools.list", header, `{"agent":"billing-bot"}`); code != "403" {
			t.Errorf("A passing for B's user, the forged header %s: %q %s", how, code, reply)
		}
	}
	for how, header := range forgedHeaders("operator") {
		if code, reply := rawAPIRequest(t, srv.URL(), "agent_a", "workers.list", header, `{}`); code != "403" {
			t.Errorf("A passing for the operator, the forged header %s: %q %s", how, code, reply)
		}
	}
	// Every refusal is audited.
	if want := 2 * len(forgedHeaders("")); countAudited(t, as("auditor"), "forbidden", want) < want {
		t.Errorf("fewer than %d refusals audited", want)
	}
}

// TestHiddenRequestInfoDoesNotPassForOneAccount: a coordinator without
// identities on the deploy configuration refuses the agents' requests,
// which carry the server's Nats-Request-Info; hiding that line from the
// parser does not make a request pass for one of the coordinator's own
// account, which it would serve as the agent it names.
func TestHiddenRequestInfoDoesNotPassForOneAccount(t *testing.T) {
	t.Parallel()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir(), ConfigFile: filepath.Join(deployDir(t), "users.conf")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	testenv.Coordinator(t, srv.URL(), func(cfg *coordinator.Config) {
		cfg.Conn = testenv.Connect(t, srv.URL(), deployUser("coordinator", deployPassword("coordinator"))...)
	})
	testenv.Worker(t, "", worker.Config{Conn: testenv.Connect(t, srv.URL(), deployUser("worker_demo", deployPassword("worker_demo"))...)}, worker.Namespace{Name: demo.Name, Tools: demo.Tools()})
	hidden := map[string]string{
		"behind a blank line":     "NATS/1.0\r\nContent-Type: application/json\n\nx\r\n\r\n",
		"glued to a skipped line": "NATS/1.0\r\nContent-Type: application/json\n:yy",
		"glued to a line's value": "NATS/1.0\r\nContent-Type: application/json\nX: yy",
	}
	for how, header := range hidden {
		if code, reply := rawAPIRequest(t, srv.URL(), "agent_a", "tools.list", header, `{"agent":"billing-bot"}`); code != "403" {
			t.Errorf("the server's header %s: %q %s", how, code, reply)
		}
	}
}
