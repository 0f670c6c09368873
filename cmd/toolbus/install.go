package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolbus/toolbus/internal/service/setup"
)

// The commands that make and change an installation with signed
// identities (docs/operations.md, "Production on one host"; docs/security.md,
// "Signed identities").

// dirFlag is the installation's directory flag of these commands.
func dirFlag(fs interface {
	String(name, value, usage string) *string
}) *string {
	return fs.String("dir", os.Getenv("TOOLBUS_DIR"), "the installation's directory ($TOOLBUS_DIR)")
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runSetup(ctx context.Context, g globals, args []string) error {
	fs := newFlags("setup")
	dir := dirFlag(fs)
	nodes := fs.Int("nodes", 0, "1 for one server, 3 for a cluster of three on this host (default 1)")
	listen := fs.String("listen", "", "host:port of the first node's clients; the others take the next ports (default the host and port of --server, $TOOLBUS_URL)")
	clusterPort := fs.Int("cluster-port", 0, "with --nodes 3: the first node's route port; the others take the next ones (default the client port + 2000)")
	var namespaces stringList
	fs.Var(&namespaces, "namespace", "a worker namespace to make an account for (repeat it for several)")
	var o setup.OIDCOptions
	fs.StringVar(&o.Issuer, "oidc-issuer", "", "an OpenID Connect issuer whose tokens make agents' users, through the auth callout toolbus authn (its URL)")
	fs.StringVar(&o.Audience, "oidc-audience", "", "with --oidc-issuer: the audience a token must hold")
	fs.StringVar(&o.AgentsClaim, "oidc-agents-claim", setup.DefaultAgentsClaim, "with --oidc-issuer: the claim naming the agents a token's user may act as")
	fs.StringVar(&o.OperatorsClaim, "oidc-operators-claim", "", "with --oidc-issuer: the claim that makes a token's user an operator (true, or holding --oidc-operators-value); without it the issuer makes no operators")
	fs.StringVar(&o.OperatorsValue, "oidc-operators-value", "", "with --oidc-operators-claim: the value (a group) that makes an operator")
	fs.StringVar(&o.ConsoleClientID, "oidc-console-client-id", "", "with --oidc-issuer: the console's client ID at the issuer, for the operators' login (toolbus up passes it)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("toolbus setup takes no arguments (got %q); namespaces are --namespace NAME", pos))
	}
	if *dir == "" {
		return usageError("toolbus setup: --dir DIR is required (the installation's directory)")
	}
	oidcGiven := false
	fs.Visit(func(f *flag.Flag) { oidcGiven = oidcGiven || strings.HasPrefix(f.Name, "oidc-") })
	if oidcGiven && o.Issuer == "" {
		return usageError("toolbus setup: the --oidc-… options need --oidc-issuer URL")
	}
	prefix := ""
	if g.prefix != "toolbus" {
		prefix = g.prefix
	}
	if _, err := setup.Open(*dir); *listen == "" && errors.Is(err, setup.ErrNoInstallation) {
		// A new installation listens where its clients reach it.
		first, _, _ := strings.Cut(g.server, ",")
		u, err := url.Parse(strings.TrimSpace(first))
		if err != nil || u.Host == "" || u.Port() == "" {
			return usageError(fmt.Sprintf("toolbus setup: --server %q names no host:port to listen on; give --listen HOST:PORT", g.server))
		}
		*listen = u.Host
	}
	in, err := setup.Setup(setup.Options{Dir: *dir, Nodes: *nodes, Listen: *listen, ClusterPort: *clusterPort, Prefix: prefix, Namespaces: namespaces})
	if err != nil {
		return misuse{err}
	}
	var pushed *setup.Pushed
	var pushErr error
	if o.Issuer != "" {
		change, err := in.ConfigureOIDC(o)
		if err != nil {
			return misuse{err}
		}
		if len(change.AccountJWTs) > 0 {
			// A running installation takes the callout's account now.
			p, err := in.Push(ctx, change)
			if !errors.Is(err, setup.ErrNotRunning) {
				pushed, pushErr = &p, err
			}
		}
	}
	if pushErr != nil {
		return pushErr
	}
	st := in.State()
	if g.json {
		return printJSON(st)
	}
	fmt.Printf("installation in %s: operator %s, %d node(s) at %s\n", in.Dir(), st.Operator, len(st.Nodes), in.URLs())
	fmt.Printf("namespaces: %s\n", strings.Join(in.Namespaces(), ", "))
	fmt.Printf("credentials: %s (one file per user, 0600)\n", in.CredsDir())
	for i := range st.Nodes {
		fmt.Printf("server: nats-server -c %s\n", in.NodeConfig(i))
	}
	if o := in.OIDC(); o != nil {
		fmt.Printf("identity provider: %s (audience %s, agents in claim %s); its tokens are checked by: toolbus authn --dir %s\n", o.Issuer, o.Audience, o.AgentsClaim, in.Dir())
	}
	fmt.Printf("run everything: toolbus up --dir %s\n", in.Dir())
	if pushed != nil {
		_ = reportPush(*pushed, nil)
		fmt.Printf("restart the servers (or toolbus up) for connections with a token alone to reach the callout\n")
	}
	return nil
}

func runNamespace(ctx context.Context, g globals, args []string) error {
	fs := newFlags("namespace")
	dir := dirFlag(fs)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return helpWith(fs, args)
	}
	action := args[0]
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return flagsFailed(err)
	}
	in, err := openInstallation(*dir)
	if err != nil {
		return err
	}
	switch {
	case action == "list" && len(pos) == 0:
		st := in.State()
		if g.json {
			return printJSON(st.Namespaces)
		}
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAMESPACE\tACCOUNT\tWORKERS' CREDENTIALS\tADDED")
		for _, name := range in.Namespaces() {
			ns := st.Namespaces[name]
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, ns.Account, in.CredsFile(setup.WorkerUser(name)), ns.Added.Format(time.RFC3339))
		}
		return w.Flush()
	case (action == "add" || action == "remove") && len(pos) == 1:
		var change setup.Change
		if action == "add" {
			change, err = in.AddNamespace(pos[0])
		} else {
			change, err = in.RemoveNamespace(pos[0])
		}
		if err != nil {
			return misuse{err}
		}
		pushed, err := in.Push(ctx, change)
		if action == "add" {
			fmt.Printf("namespace %s added: its workers connect with --creds %s (or --creds-dir %s)\n", pos[0], in.CredsFile(setup.WorkerUser(pos[0])), in.CredsDir())
		} else {
			fmt.Printf("namespace %s removed: its workers are disconnected and refused; its tools leave the catalog with: toolbus tools remove %s\n", pos[0], pos[0])
		}
		return reportPush(pushed, err)
	}
	return runHelpOf("namespace", nil)
}

func runAgent(ctx context.Context, g globals, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return runHelpOf("agent", args)
	}
	action := args[0]
	fs := newFlags("agent")
	dir := dirFlag(fs)
	var actsAs stringList
	fs.Var(&actsAs, "acts-as", "with add: an agent the user may act as, or a pattern (triage-*); repeat it for several (default the user's own name)")
	operator := fs.Bool("operator", false, "with add: the user is an operator (decides approvals, switches tools, reads every call, may act as any agent)")
	expires := fs.String("expires", "", "with add: how long the credentials last (90m, 720h, 30d; default for ever)")
	route := fs.String("route", "", "with add: the route its results come on, 22 letters and digits (default a new one)")
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return flagsFailed(err)
	}
	in, err := openInstallation(*dir)
	if err != nil {
		return err
	}
	switch {
	case action == "list" && len(pos) == 0:
		agents := in.Agents()
		if g.json {
			return printJSON(agents)
		}
		var names []string
		for name := range agents {
			names = append(names, name)
		}
		sort.Strings(names)
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "USER\tACTS AS\tROUTE\tEXPIRES\tCREDENTIALS")
		for _, name := range names {
			a := agents[name]
			acts := strings.Join(a.ActsAs, ",")
			if a.Operator {
				acts = strings.TrimPrefix(acts+",(operator)", ",")
			}
			exp := "never"
			if a.Expires != nil {
				exp = a.Expires.Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", name, acts, strings.Join(a.Routes, ","), exp, in.CredsFile(name))
		}
		return w.Flush()
	case action == "add" && len(pos) == 1:
		opts := setup.AgentOptions{ActsAs: actsAs, Operator: *operator, Route: *route}
		if *expires != "" {
			if opts.Expires, err = setup.ParseExpiry(*expires); err != nil {
				return usageError(err.Error())
			}
		}
		a, err := in.AddAgent(pos[0], opts)
		if err != nil {
			return misuse{err}
		}
		if g.json {
			return printJSON(a)
		}
		fmt.Printf("agent user %s added: it connects with --creds %s (route %s)\n", pos[0], in.CredsFile(pos[0]), a.Routes[0])
		return nil
	case action == "revoke" && len(pos) == 1:
		change, err := in.RevokeAgent(pos[0])
		if err != nil {
			return misuse{err}
		}
		pushed, err := in.Push(ctx, change)
		fmt.Printf("agent user %s revoked: the servers disconnect it and refuse it from now on\n", pos[0])
		return reportPush(pushed, err)
	}
	return runHelpOf("agent", nil)
}

// runHelpOf prints a command's usage: on standard output, exit 0, when
// asked for; on standard error, as a usage error, otherwise.
func runHelpOf(name string, args []string) error {
	return helpWith(newFlags(name), args)
}

// helpWith is runHelpOf of a command whose flags fs holds.
func helpWith(fs *flag.FlagSet, args []string) error {
	if len(args) > 0 && (args[0] == "--help" || args[0] == "-h" || args[0] == "-help") {
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return nil
	}
	fs.Usage()
	return exitError(exitUsage)
}

func openInstallation(dir string) (*setup.Installation, error) {
	if dir == "" {
		return nil, usageError("--dir DIR ($TOOLBUS_DIR) is required: the installation's directory, made by toolbus setup")
	}
	in, err := setup.Open(dir)
	if err != nil {
		return nil, misuse{err}
	}
	return in, nil
}

// reportPush says which servers took a change. No running server is not
// an error: the servers load the change when they start.
func reportPush(p setup.Pushed, err error) error {
	switch {
	case errors.Is(err, setup.ErrNotRunning):
		fmt.Printf("no server of the installation is running: they load the change when they start\n")
		return nil
	case err != nil:
		return err
	case len(p.Servers) < p.Nodes:
		fmt.Printf("pushed to %d of %d servers (%s); the others take it from their resolver's peers\n", len(p.Servers), p.Nodes, strings.Join(p.Servers, ", "))
	default:
		fmt.Printf("pushed to %d server(s): %s\n", len(p.Servers), strings.Join(p.Servers, ", "))
	}
	return nil
}
