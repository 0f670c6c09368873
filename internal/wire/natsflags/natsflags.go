// Package natsflags gives Toolbus's commands the same flags for reaching
// NATS — server, credentials, user, prefix, verbosity — each with an
// environment variable as its default.
package natsflags

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/pkg/messages"
)

// Flags are the connection settings of a command.
type Flags struct {
	Server   string
	Creds    string
	User     string
	Password string
	Prefix   string
	// Inbox is the prefix of the connection's reply subjects. Empty means
	// InboxPrefix(User) for a connection as a user, InboxPrefix of the
	// name in the user's JWT with credentials, and the client's default
	// otherwise.
	Inbox string
	// Token is a token of the installation's identity provider, which the
	// server's auth callout checks (toolbus authn): without credentials,
	// the connection's inbox prefix is the token's (messages.TokenInbox).
	Token   string
	Verbose bool
}

// Register adds the flags to fs.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.Server, "server", envOr("TOOLBUS_URL", nats.DefaultURL), "NATS server URL ($TOOLBUS_URL)")
	fs.StringVar(&f.Creds, "creds", os.Getenv("TOOLBUS_CREDS"), "NATS credentials file ($TOOLBUS_CREDS)")
	fs.StringVar(&f.User, "user", os.Getenv("TOOLBUS_USER"), "NATS user ($TOOLBUS_USER)")
	fs.StringVar(&f.Password, "password", os.Getenv("TOOLBUS_PASSWORD"), "NATS password ($TOOLBUS_PASSWORD)")
	fs.StringVar(&f.Prefix, "prefix", messages.DefaultPrefix, "subject prefix")
	fs.StringVar(&f.Inbox, "inbox-prefix", os.Getenv("TOOLBUS_INBOX_PREFIX"), "prefix of reply subjects; defaults to _INBOX_<user> with --user ($TOOLBUS_INBOX_PREFIX)")
	fs.BoolVar(&f.Verbose, "v", false, "log at debug level")
	return f
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Connect opens a connection that reconnects for ever, named for the
// server's monitoring. A connection as a user receives its replies under
// the user's own inbox prefix (see InboxPrefix) unless Inbox says another.
func (f *Flags) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	// A server asks its resolver's peers for the account of a user it does
	// not know (2 s with toolbus setup's configuration) before it refuses
	// it: the connection waits for that answer.
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.Timeout(5 * time.Second)}, extra...)
	inbox := f.Inbox
	if f.Creds != "" {
		user, err := CredsUser(f.Creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.UserCredentials(f.Creds))
		if inbox == "" && f.User == "" {
			inbox = InboxPrefix(user)
		}
	}
	if f.User != "" {
		opts = append(opts, nats.UserInfo(f.User, f.Password))
		if inbox == "" {
			inbox = InboxPrefix(f.User)
		}
	}
	if f.Token != "" {
		opts = append(opts, nats.Token(f.Token))
		if inbox == "" && f.Creds == "" && f.User == "" {
			prefix, err := messages.TokenInboxOf(f.Token)
			if err != nil {
				return nil, fmt.Errorf("token: %w", err)
			}
			inbox = prefix
		}
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(f.Server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.Server, err)
	}
	return nc, nil
}

// Logger logs text to standard error, at debug level with -v.
func (f *Flags) Logger() *slog.Logger {
	level := slog.LevelInfo
	if f.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// CredsUser reads a credentials file (see ReadCreds) and returns the
// user's name: its JWT's, else its public key.
func CredsUser(path string) (string, error) {
	claims, err := ReadCreds(path)
	if err != nil {
		return "", err
	}
	if claims.Name != "" {
		return claims.Name, nil
	}
	return claims.Subject, nil
}

// ReadCreds reads a credentials file (a user's JWT and seed, as toolbus
// setup writes them) and returns the JWT's claims: the error of a file
// that is missing, truncated, altered or not one names the file and what
// is wrong, before any connection is tried.
func ReadCreds(path string) (*jwt.UserClaims, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", path, err)
	}
	token, err := jwt.ParseDecoratedJWT(data)
	if err != nil || !strings.Contains(string(data), "-----BEGIN NATS USER JWT-----") {
		return nil, fmt.Errorf("credentials %s: not a credentials file: no user JWT after a -----BEGIN NATS USER JWT----- line", path)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: the user JWT cannot be read (truncated, or altered): %v", path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(data)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: the user's seed cannot be read (truncated, or altered): %v", path, err)
	}
	if pub, err := kp.PublicKey(); err != nil || pub != claims.Subject {
		return nil, fmt.Errorf("credentials %s: the seed is not the key of the user the JWT names (%s)", path, claims.Subject)
	}
	return claims, nil
}

// InboxPrefix is the prefix of the reply subjects of a connection as user:
// "_INBOX_" and the user's name, so that the server can let each user
// subscribe to its own replies only (deploy/nats/users.inc does). It is
// empty for a name that cannot be one subject token.
func InboxPrefix(user string) string {
	if user == "" || strings.ContainsAny(user, ".*> \t\r\n") {
		return ""
	}
	return "_INBOX_" + user
}
