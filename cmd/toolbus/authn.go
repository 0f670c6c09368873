package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/service/authn"
	"github.com/toolbus/toolbus/internal/service/setup"
	"github.com/toolbus/toolbus/internal/support/oidc"
)

// runAuthn runs the installation's auth callout: agents connect with a
// token of its identity provider (docs/operations.md, "Agents from the
// identity provider").
func runAuthn(ctx context.Context, _ globals, args []string) error {
	fs := newFlags("authn")
	dir := dirFlag(fs)
	maxTTL := fs.Duration("max-ttl", authn.DefaultMaxTTL, "the longest a user issued for a token lasts (it ends with its token if that comes first)")
	workers := fs.Int("workers", authn.DefaultWorkers, "tokens checked at once")
	queue := fs.Int("queue", authn.DefaultQueue, "connections that may wait for a check; beyond them a connection is refused at once")
	fetchTimeout := fs.Duration("fetch-timeout", oidc.DefaultFetchTimeout, "bound of each request to the issuer (its discovery document, its keys)")
	verbose := fs.Bool("v", false, "log every user issued")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return flagsFailed(err)
	}
	if len(pos) > 0 {
		return usageError(fmt.Sprintf("toolbus authn takes no arguments (got %q)", pos))
	}
	if *maxTTL <= 0 || *workers <= 0 || *queue <= 0 || *fetchTimeout <= 0 {
		return usageError("toolbus authn: --max-ttl, --workers, --queue and --fetch-timeout must be positive")
	}
	in, err := openInstallation(*dir)
	if err != nil {
		return err
	}
	o := in.OIDC()
	if o == nil {
		return misuse{fmt.Errorf("the installation in %s has no identity provider: toolbus setup --dir %s --oidc-issuer URL --oidc-audience A", in.Dir(), in.Dir())}
	}
	answers, users, err := in.AuthnKeys()
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	verifier, err := oidc.NewVerifier(oidc.Config{Issuer: o.Issuer, Audiences: []string{o.Audience}, FetchTimeout: *fetchTimeout})
	if err != nil {
		return misuse{err}
	}
	urls := in.URLs()
	nc, err := nats.Connect(urls, nats.UserCredentials(in.AuthnCreds()), nats.Name("toolbus-authn"), nats.MaxReconnects(-1), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("authn: connect to %s as %s: %w", urls, in.AuthnCreds(), err)
	}
	defer nc.Close()
	callout, err := authn.Start(authn.Config{
		Conn: nc, Verifier: verifier,
		AgentsAccount: in.State().Accounts[setup.AccountAgents], UserKey: users, AnswerKey: answers,
		AgentsClaim: o.AgentsClaim, OperatorsClaim: o.OperatorsClaim, OperatorsValue: o.OperatorsValue,
		MaxTTL: *maxTTL, Workers: *workers, Queue: *queue, Logger: log,
	})
	if err != nil {
		return err
	}
	defer callout.Stop()
	log.Info("toolbus authn: checking the tokens of the identity provider", "issuer", o.Issuer, "audience", o.Audience, "agents_claim", o.AgentsClaim, "operators_claim", o.OperatorsClaim, "servers", urls)
	go func() {
		// The keys are fetched when a token needs them; say now if the
		// issuer cannot be reached, rather than at the first refusal.
		if _, err := verifier.Metadata(ctx); err != nil && ctx.Err() == nil {
			log.Warn("the identity provider cannot be reached now: tokens are refused until it can", "error", err)
		}
	}()
	<-ctx.Done()
	st := callout.Stats()
	log.Info("toolbus authn: stopping", "issued", st.Issued, "refused", st.Refused, "busy", st.Busy)
	return nil
}
