// Command toolbus is Toolbus's command-line client and its all-in-one mode.
//
//	toolbus dev                        run NATS, a coordinator and a demo worker in one process
//	toolbus mcp --listen ADDR | --stdio serve Toolbus to MCP clients
//	toolbus console --tokens FILE      serve the operators' admin console
//	toolbus tools                      list the catalog
//	toolbus search QUERY               discovery: the tools that best match, with scores
//	toolbus call TOOL [JSON] [--watch] call a tool and print its result
//	toolbus calls get|watch|cancel ID  follow one call
//	toolbus calls list [filters]       the execution log, newest call first
//	toolbus turns get ID               show an agent turn's calls
//	toolbus approvals list|approve|deny
//	toolbus approvals answer ID --approve|--deny  an agent's user answers a prompt-mode approval
//	toolbus tools disable|enable NAME
//	toolbus tools remove NAME          remove stale tools (operators)
//	toolbus audit [filters]            the audit log, newest record first (operators)
//	toolbus workers                    the live workers and their slots (operators)
//	toolbus policy check FILE          check a policy file against the catalog
//	toolbus policy explain TOOL [JSON] which rule decides a call, and why (operators)
//	toolbus setup --dir DIR            make an installation with signed NATS identities
//	toolbus namespace add|remove|list  a worker namespace's account, live
//	toolbus agent add|revoke|list      an agent's user, live
//	toolbus up --dir DIR               run an installation's servers and services
//	toolbus learning [status [TOOL]|on|off|reset] discovery's learning from use (operators)
//
// Measuring is for developers and has a command of its own, toolbus-bench.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/wire/natsflags"
	"github.com/toolbus/toolbus/pkg/client"
	"github.com/toolbus/toolbus/pkg/messages"
)

const usage = `toolbus — tool registry and execution plane for agent fleets

Usage:
  toolbus [global flags] <command> [flags] [arguments]

Commands:
  dev                          run an embedded NATS server, a coordinator and a demo worker
                               (prints the MCP endpoint and the admin console's URL, --console-port)
                               (--worker-config FILE also serves a worker configuration, see docs/workers.md;
                               on Ctrl-C running calls may finish for --drain, 10s, then are handed back)
  mcp                          serve Toolbus to MCP clients: streamable HTTP on --listen ADDR
                               (/mcp; --tokens FILE or $TOOLBUS_MCP_TOKENS map bearer tokens to
                               agents, else --agent on loopback only), or --stdio (docs/mcp.md)
  console                      serve the admin console on --listen ADDR (default 127.0.0.1:8090) to
                               operators who log in with a token of --tokens FILE or
                               $TOOLBUS_CONSOLE_TOKENS (docs/operations.md)
  tools                        list the tools in the catalog
  search QUERY...              the tools that best match QUERY, best first, with their scores
                               (--namespace N, --tag T, --limit N, --page P; --agent's view)
  tools disable|enable NAME    switch a tool or a namespace off (with --reason) or on
  tools remove NAME            remove a stale tool, or every tool of a namespace, from the catalog
  approvals list               list approvals (--state pending|approved|denied|expired|withdrawn|all;
                               pending by default)
  approvals approve|deny ID    decide an approval (--remember call|turn|agent_tool, --reason,
                               --by NAME; default the NATS user of --user, else this system's
                               name for the user running toolbus)
  approvals answer ID --approve|--deny
                               pass on the user's answer to an approval in prompt mode, as the
                               agent whose call it holds (--remember, --reason, --by as above)
  call TOOL [JSON-ARGS]        call a tool and print its result (--watch shows progress);
                               waits as long as the call runs, --timeout D bounds the call
  calls get|watch|cancel ID    show, follow or cancel a call (get --trace: with its trace ID;
                               get --full: a cut result read whole; cancel --reason R)
  calls list                   the execution log, newest call first (--agent, --turn, --tool,
                               --namespace, --state S..., --since/--until 1h|RFC3339, --limit N,
                               --cursor C from the previous page)
  turns get TURN               show the calls of an agent turn
  audit                        the audit log, newest record first (operators; --decision D,
                               --agent, --tool, --since/--until 1h|RFC3339, --limit N,
                               --cursor C from the previous page)
  workers                      the live workers with their busy and total slots (operators;
                               --namespace N)
  policy check FILE            load a policy file as the coordinator does and check its rules
                               against the catalog of the running Toolbus (--catalog FILE: of a
                               file that toolbus --json tools wrote, offline); exit 1 on a problem
  policy explain TOOL [JSON-ARGS]
                               which rule of the policy in force decides the call, and why
                               (operators; --agent A, the agent that would call)
  setup --dir DIR              make an installation with signed NATS identities: operator, accounts,
                               server configurations, a credentials file per user (--nodes 1|3,
                               --namespace NS...; running it again changes nothing; --oidc-issuer
                               URL --oidc-audience A: agents from an identity provider)
  namespace add|remove NAME    a worker namespace's account and credentials, pushed to the running
                               servers (and: namespace list)
  agent add NAME               an agent's user whose signed JWT says the agents it acts as
                               (--acts-as PATTERN..., --operator, --expires D); agent revoke NAME
                               disconnects and refuses it (and: agent list)
  up --dir DIR                 run the installation: its NATS servers, two coordinators, a worker of
                               its namespaces, the indexer, the console and the MCP front (and
                               toolbus authn, with an identity provider)
  authn --dir DIR              the auth callout: a connection with a token of the installation's
                               identity provider (setup --oidc-issuer) is a user of its agents
  health URL                   ask a health endpoint (a process's /healthz or /readyz): exit status 0
                               when it answers 200, else 1 (a container's health check)
  learning [status [TOOL]]     whether discovery learns from use, how much evidence there is,
                               and what it learned of TOOL (operators)
  learning off|on              switch learning from use off (--reason R) or on, for every
                               coordinator and indexer (operators)
  learning reset TOOL|--all    forget the usage evidence for a tool, or for all (operators)
  help [COMMAND]               this text, or a command's synopsis and flags: every command
                               takes --help (standard output, exit status 0)

Global flags:
  --server URL   NATS server (default $TOOLBUS_URL or nats://127.0.0.1:4222)
  --prefix P     subject prefix (default toolbus)
  --agent NAME   agent name sent with calls
  --user U, --password P, --creds FILE
                 connect as a NATS user ($TOOLBUS_USER, $TOOLBUS_PASSWORD, $TOOLBUS_CREDS):
                 an agent's or operator's user of a deployment (docs/security.md).
                 Replies then come on the user's own inbox prefix (_INBOX_<user>,
                 or --inbox-prefix), and calls are read through the coordinator
  --token T      connect with a token of the installation's identity provider ($TOOLBUS_TOKEN),
                 which toolbus authn checks: replies come on the token's own inbox prefix,
                 and calls are read through the coordinator
  --route R      the route the user's results come on ($TOOLBUS_ROUTE; one of its
                 routes in the coordinator's identities file)
  --json         print replies, and errors, as JSON (anywhere on the command line);
                 with --watch and calls watch, one JSON line per event

Exit status: 0 success; 1 the call's result is an error (tool error, failed,
cancelled, timed out, denied), or policy check found a problem; 2 usage;
3 Toolbus could not be reached or refused the request.
`

type globals struct {
	server   string
	prefix   string
	agent    string
	json     bool
	user     string
	password string
	creds    string
	inbox    string
	route    string
	token    string
}

func main() {
	os.Exit(finish(run(os.Args[1:]), os.Stdout, os.Stderr))
}

// Exit statuses; README.md lists them.
const (
	exitOK = 0
	// exitCallFailed: the call ended and its result is an error (a tool
	// error, or the call failed, was cancelled, timed out or was denied).
	exitCallFailed = 1
	// exitUsage: the command line is wrong (unknown command or flag,
	// missing argument, arguments that are not JSON).
	exitUsage = 2
	// exitRequestFailed: Toolbus could not be reached, or refused the
	// request (the error's code says why).
	exitRequestFailed = 3
	// exitInterrupted: a watch was interrupted (Ctrl-C, SIGTERM); the call
	// it followed goes on.
	exitInterrupted = 130
)

// exitError ends the program with a status and no further message.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// usageError is a mistake in the command line, reported as an error with
// the usage status.
type usageError string

func (e usageError) Error() string { return string(e) }

// misuse is a refusal of Toolbus that a value of the command line caused
// (see commandLineRefused): reported with its code, with the usage status.
type misuse struct{ err error }

func (e misuse) Error() string { return e.err.Error() }
func (e misuse) Unwrap() error { return e.err }

// jsonErrors marks the error of a command run with --json, which is
// printed as JSON.
type jsonErrors struct{ err error }

// cliError is an error with a code of the command line's own, for --json
// (the coordinator's codes are for what it answers): "unreachable" when no
// server answers at the URL or the credentials cannot be read,
// "unauthorized" when the server refuses them.
type cliError struct {
	code string
	err  error
}

func (e cliError) Error() string { return e.err.Error() }
func (e cliError) Unwrap() error { return e.err }

func (e jsonErrors) Error() string { return e.err.Error() }
func (e jsonErrors) Unwrap() error { return e.err }

// finish reports the error of run, if any, and returns the exit status.
// Errors are text on standard error; with --json they are a JSON object
// on standard output, where the reply would have been:
//
//	{"error": {"code": "tool_not_found", "message": "..."}, "exit_code": 3}
func finish(err error, stdout, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ex exitError
	var asJSON jsonErrors
	if errors.As(err, &ex) {
		if int(ex) == exitUsage && errors.As(err, &asJSON) {
			// The usage went to standard error as text; a reader of standard
			// output still gets an error where the reply would have been.
			fmt.Fprintf(stdout, `{"error":{"code":"usage","message":"the command line is wrong; the usage is on standard error"},"exit_code":%d}`+"\n", exitUsage)
		}
		return int(ex) // already reported
	}
	status := exitRequestFailed
	var usage usageError
	var misused misuse
	if errors.As(err, &usage) || errors.As(err, &misused) {
		status = exitUsage
	}
	if !errors.As(err, &asJSON) {
		fmt.Fprintln(stderr, "toolbus:", err)
		return status
	}
	type errorJSON struct {
		Code    string   `json:"code,omitempty"`
		Message string   `json:"message"`
		Details []string `json:"details,omitempty"`
	}
	out := struct {
		Error    errorJSON `json:"error"`
		ExitCode int       `json:"exit_code"`
	}{Error: errorJSON{Message: asJSON.err.Error()}, ExitCode: status}
	var e *messages.Error
	var own cliError
	switch {
	case errors.As(err, &e):
		out.Error = errorJSON{Code: string(e.Code), Message: e.Message, Details: e.Details}
	case errors.As(err, &own):
		out.Error.Code = own.code
	case status == exitUsage:
		out.Error.Code = "usage"
	}
	data, merr := json.Marshal(out)
	if merr != nil {
		fmt.Fprintln(stderr, "toolbus:", err)
		return status
	}
	fmt.Fprintf(stdout, "%s\n", data)
	return status
}

func run(args []string) error {
	g := globals{server: os.Getenv("TOOLBUS_URL"), prefix: messages.DefaultPrefix}
	if g.server == "" {
		g.server = nats.DefaultURL
	}
	fs := flag.NewFlagSet("toolbus", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage) }
	fs.StringVar(&g.server, "server", g.server, "NATS server URL")
	fs.StringVar(&g.prefix, "prefix", g.prefix, "subject prefix")
	fs.StringVar(&g.agent, "agent", "", "agent name")
	fs.StringVar(&g.user, "user", os.Getenv("TOOLBUS_USER"), "NATS user")
	fs.StringVar(&g.password, "password", os.Getenv("TOOLBUS_PASSWORD"), "NATS password")
	fs.StringVar(&g.creds, "creds", os.Getenv("TOOLBUS_CREDS"), "NATS credentials file")
	fs.StringVar(&g.inbox, "inbox-prefix", os.Getenv("TOOLBUS_INBOX_PREFIX"), "prefix of reply subjects")
	fs.StringVar(&g.route, "route", os.Getenv("TOOLBUS_ROUTE"), "the user's route")
	fs.StringVar(&g.token, "token", os.Getenv("TOOLBUS_TOKEN"), "a token of the installation's identity provider")
	fs.BoolVar(&g.json, "json", false, "print JSON")
	// --json may also come after the command ("toolbus calls watch --json ID").
	args, g.json = takeJSONFlag(args)
	if err := parseFlags(fs, args); err != nil {
		return flagsFailed(err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return exitError(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := runCommand(ctx, g, fs, rest[0], rest[1:])
	if err != nil && g.json {
		return jsonErrors{err}
	}
	return err
}

func runCommand(ctx context.Context, g globals, fs *flag.FlagSet, cmd string, cmdArgs []string) error {
	switch cmd {
	case "dev":
		return runDev(ctx, g, cmdArgs)
	case "mcp":
		return runMCP(ctx, g, cmdArgs)
	case "console":
		return runConsole(ctx, g, cmdArgs)
	case "tools":
		if len(cmdArgs) > 0 && (cmdArgs[0] == "enable" || cmdArgs[0] == "disable") {
			return runToolSwitch(ctx, g, cmdArgs[0] == "enable", cmdArgs[1:])
		}
		if len(cmdArgs) > 0 && cmdArgs[0] == "remove" {
			return runToolsRemove(ctx, g, cmdArgs[1:])
		}
		return runTools(ctx, g, cmdArgs)
	case "approvals":
		return runApprovals(ctx, g, cmdArgs)
	case "call":
		return runCall(ctx, g, cmdArgs)
	case "calls":
		return runCalls(ctx, g, cmdArgs)
	case "turns":
		return runTurns(ctx, g, cmdArgs)
	case "audit":
		return runAudit(ctx, g, cmdArgs)
	case "workers":
		return runWorkers(ctx, g, cmdArgs)
	case "policy":
		return runPolicy(ctx, g, cmdArgs)
	case "search":
		return runSearch(ctx, g, cmdArgs)
	case "setup":
		return runSetup(ctx, g, cmdArgs)
	case "namespace":
		return runNamespace(ctx, g, cmdArgs)
	case "agent":
		return runAgent(ctx, g, cmdArgs)
	case "up":
		return runUp(ctx, g, cmdArgs)
	case "authn":
		return runAuthn(ctx, g, cmdArgs)
	case "health":
		return runHealth(ctx, g, cmdArgs)
	case "learning":
		return runLearning(ctx, g, cmdArgs)
	case "help":
		if len(cmdArgs) > 0 && cmdArgs[0] != "help" && !strings.HasPrefix(cmdArgs[0], "-") {
			// toolbus help COMMAND [ACTION] is COMMAND [ACTION] --help.
			return runCommand(ctx, g, fs, cmdArgs[0], append(cmdArgs[1:], "--help"))
		}
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return nil
	}
	fmt.Fprintf(os.Stderr, "toolbus: unknown command %q\n\n", cmd)
	fs.Usage()
	return exitError(2)
}

// connect opens a connection and a client. A user of signed credentials
// without --route takes the route its JWT lets it receive, if it has one.
func (g globals) connect() (*nats.Conn, *client.Client, error) {
	if g.route == "" && g.creds != "" {
		if claims, err := natsflags.ReadCreds(g.creds); err == nil {
			g.route = credsRoute(claims.Sub.Allow, g.prefix)
		}
	}
	conn := natsflags.Flags{Server: g.server, Creds: g.creds, User: g.user, Password: g.password, Inbox: g.inbox, Token: g.token}
	nc, err := conn.Connect("toolbus-cli")
	if err != nil {
		code := "unreachable"
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
			code = "unauthorized"
		}
		return nil, nil, cliError{code: code, err: g.connectError(err)}
	}
	// A user of a deployment is an agent's or an operator's, whose account
	// reads calls through the coordinator only.
	authenticated := g.user != "" || g.creds != "" || g.token != ""
	c, err := client.New(nc, client.Options{Prefix: g.prefix, Agent: g.agent, Route: g.route, CoordinatorReads: authenticated})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

// credsRoute is the route a user's subscribe permissions let it receive,
// <prefix>.results.<route>.>, when they name exactly one.
func credsRoute(allowed []string, prefix string) string {
	route := ""
	for _, s := range allowed {
		r, prefixed := strings.CutPrefix(s, prefix+".results.")
		r, suffixed := strings.CutSuffix(r, ".>")
		if !prefixed || !suffixed || messages.ValidateRoute(r) != nil {
			continue
		}
		if route != "" {
			return ""
		}
		route = r
	}
	return route
}

// natsUser is the NATS user the command connects as: --user's, else the
// name in --creds's JWT.
func (g globals) natsUser() string {
	if g.user != "" || g.creds == "" {
		return g.user
	}
	name, err := natsflags.CredsUser(g.creds)
	if err != nil {
		return ""
	}
	return name
}

// connectError says why the connection failed: the server refused the
// credentials, or none answered.
func (g globals) connectError(err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		switch {
		case g.token != "":
			return fmt.Errorf("%w: the server refused the token (of another issuer or audience, expired, naming no agent, or the auth callout toolbus authn is not running; its log says why): check --token ($TOOLBUS_TOKEN)", err)
		case g.creds != "":
			return fmt.Errorf("%w: the server refused the credentials in %s (expired, revoked, or of another server): check --creds ($TOOLBUS_CREDS)", err, g.creds)
		case g.user != "":
			return fmt.Errorf("%w: the server refused user %s's credentials (a wrong password, or no such user): check --user and --password ($TOOLBUS_USER, $TOOLBUS_PASSWORD)", err, g.user)
		}
		return fmt.Errorf("%w: the server asks for credentials: connect as a user with --user and --password ($TOOLBUS_USER, $TOOLBUS_PASSWORD) or --creds ($TOOLBUS_CREDS)", err)
	case errors.Is(err, nats.ErrNoServers) && (g.creds != "" || g.token != "" || g.user != ""):
		// A user of an installation: its server is elsewhere than dev's.
		return fmt.Errorf("%w at %s (is the installation's NATS server there? name it with --server URL or $TOOLBUS_URL)", err, g.server)
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("%w at %s (is Toolbus running? start it with: go run ./cmd/toolbus dev; or name its server with --server URL or $TOOLBUS_URL)", err, g.server)
	}
	return err
}

// synopses are the commands' usage lines, by the name of their flag set.
var synopses = map[string]string{
	"dev":                  "toolbus dev [flags]: run an embedded NATS server, a coordinator, a demo worker, the indexer, the MCP front and the admin console in one process",
	"mcp":                  "toolbus mcp [--listen ADDR] [--tokens FILE] [--oidc-issuer URL [--resource URL] [--oidc-audience A] [--oidc-agents-claim C]] | toolbus mcp --stdio: serve Toolbus to MCP clients (docs/mcp.md)",
	"console":              "toolbus console [--listen ADDR] [--tokens FILE] [--oidc-issuer URL --oidc-client-id ID --oidc-operators-claim C [--oidc-operators-value V]]: serve the admin console to operators who log in with a token or the identity provider (docs/operations.md)",
	"tools":                "toolbus tools [--namespace N]: the catalog (and: toolbus tools enable|disable|remove NAME)",
	"tools enable|disable": "toolbus tools disable NAME --reason R | toolbus tools enable NAME: switch a tool or a namespace off or on",
	"tools remove":         "toolbus tools remove TOOL-OR-NAMESPACE [--reason R]: remove stale tools from the catalog (operators)",
	"search":               "toolbus search [--namespace N]... [--tag T]... [--limit N] [--page P] QUERY...: the tools that best match QUERY, with their scores",
	"call":                 "toolbus call [--watch | --detach] [--timeout D] [--turn T] [--idempotency-key K] TOOL [JSON-ARGS]: call a tool and print its result",
	"calls":                "toolbus calls get [--trace] [--full] ID | calls watch ID | calls cancel [--reason R] ID (and: toolbus calls list --help)",
	"calls list":           "toolbus calls list [--agent A] [--turn T] [--tool X] [--namespace N] [--state S]... [--since T] [--until T] [--limit N] [--cursor C]: the execution log, newest call first",
	"turns get":            "toolbus turns get TURN: an agent turn and its calls",
	"approvals":            strings.TrimPrefix(approvalsUsage, "usage: "),
	"audit":                "toolbus audit [--decision D] [--agent A] [--tool T] [--since T] [--until T] [--limit N] [--cursor C]: the audit log, newest record first (operators)",
	"workers":              "toolbus workers [--namespace N]: the live workers and their slots (operators)",
	"setup":                "toolbus setup --dir DIR [--nodes 1|3] [--listen HOST:PORT] [--cluster-port P] [--namespace NS]... [--oidc-issuer URL --oidc-audience A [--oidc-agents-claim C] [--oidc-operators-claim C [--oidc-operators-value V]] [--oidc-console-client-id ID]]: make an installation with signed NATS identities (docs/operations.md)",
	"namespace":            "toolbus namespace add|remove NAME | toolbus namespace list [--dir DIR]: a worker namespace's account, added or removed live",
	"agent":                "toolbus agent add NAME [--acts-as PATTERN]... [--operator] [--expires D] [--route R] | agent revoke NAME | agent list [--dir DIR]: an agent's user, issued or revoked live",
	"authn":                "toolbus authn --dir DIR [--max-ttl D] [--workers N] [--queue N] [--fetch-timeout D] [-v]: the auth callout, which makes a connection with a token of the installation's identity provider a user of its agents (docs/operations.md)",
	"up":                   "toolbus up --dir DIR [--worker-config FILE] [--workspace DIR] [--policy FILE] [--coordinators N] [--nats-server PROGRAM] [--console-listen ADDR] [--mcp-listen ADDR] [--mcp-resource URL] [--console-url URL]: run an installation's servers and services, restarting any that stops",
	"health":               "toolbus health [--timeout D] URL: ask a health endpoint (/healthz, /readyz); exit status 0 when it answers 200, else 1 (a container's health check)",
	"policy":               "toolbus policy check FILE [--catalog FILE] | toolbus policy explain TOOL [JSON-ARGS] [--agent A]: check a policy file against the catalog, or ask which rule decides a call",
	"policy check":         "toolbus policy check FILE [--catalog FILE]: load a policy file as the coordinator does and hold its rules against the catalog; exit 1 when it finds a problem",
	"policy explain":       "toolbus policy explain TOOL [JSON-ARGS] [--agent A]: which rule of the policy in force decides the call, and why (operators)",
	"learning":             "toolbus learning [status [TOOL]] | learning off --reason R | learning on | learning reset TOOL | learning reset --all: what discovery learned from use, and switching it off, on, or forgetting it (operators)",
}

// newFlags is the flag set of a command. Its usage is its synopsis and
// its flags.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("toolbus "+name, flag.ContinueOnError)
	fs.Usage = func() {
		synopsis := synopses[name]
		if synopsis == "" {
			synopsis = "toolbus " + name
		}
		fmt.Fprintf(fs.Output(), "usage: %s\n", synopsis)
		flags := false
		fs.VisitAll(func(*flag.Flag) { flags = true })
		if flags {
			fmt.Fprintf(fs.Output(), "\nflags:\n")
			fs.PrintDefaults()
		}
		fmt.Fprintf(fs.Output(), "\nglobal flags (before the command): toolbus --help\n")
	}
	return fs
}

// parseFlags parses args with fs. Asked for help (-h, --help), it prints
// the usage on standard output and returns flag.ErrHelp; after a mistake,
// the flag package's message and the usage go to standard error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fs.Usage()
		fs.SetOutput(nil)
	case err != nil:
		fs.Usage()
	}
	return err
}

// flagsFailed is what a command returns when its flags were not parsed:
// nothing more after the help it was asked for, the usage status after a
// mistake.
func flagsFailed(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return exitError(exitUsage)
}

// parseInterleaved parses flags that may come before or after positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// takeJSONFlag removes --json from anywhere in the command line (before a
// "--") and reports whether it was there.
func takeJSONFlag(args []string) ([]string, bool) {
	out := make([]string, 0, len(args))
	found := false
	for i, a := range args {
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		switch a {
		case "--json", "-json", "--json=true", "-json=true":
			found = true
			continue
		}
		out = append(out, a)
	}
	return out, found
}
