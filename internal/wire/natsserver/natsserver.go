// Package natsserver runs a NATS server with JetStream inside the process:
// the all-in-one mode's server and the one every test talks to.
package natsserver

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config says how to run the embedded server.
type Config struct {
	// DataDir holds JetStream's file store. Required.
	DataDir string
	// Host to listen on. Defaults to 127.0.0.1: the embedded server is for one machine.
	Host string
	// Port to listen on; 0 picks a free port.
	Port int
	// ConfigFile, when set, is a nats-server configuration file (users,
	// permissions, cluster) applied before Host, Port and DataDir.
	ConfigFile string
	// MaxPayload overrides the server's 1 MiB message size limit when positive.
	MaxPayload int32
	// Logging sends the server's log to standard error.
	Logging bool
	// ServerName names the server; it must be unique within a cluster.
	ServerName string
}

// Server is a running embedded server.
type Server struct {
	*server.Server
	// unlock frees the data directory (lockDataDir).
	unlock func()
}

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("natsserver: DataDir is required")
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	unlock := func() {
		once.Do(func() {
			if lock != nil {
				lock.Close() // closing the file releases its lock
			}
		})
	}
	srv, err := start(cfg)
	if err != nil {
		unlock()
		return nil, err
	}
	srv.unlock = unlock
	// However the server stops (Stop, or its own Shutdown), the directory
	// is free again once it has; Stop frees it before it returns.
	go func() {
		srv.WaitForShutdown()
		unlock()
	}()
	return srv, nil
}

func start(cfg Config) (*Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		fileOpts, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("natsserver: read %s: %w", cfg.ConfigFile, err)
		}
		opts = fileOpts
	}
	opts.Host = cfg.Host
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	opts.Port = cfg.Port
	if opts.Port == 0 {
		opts.Port = server.RANDOM_PORT
	}
	if cfg.ServerName != "" {
		opts.ServerName = cfg.ServerName
	}
	opts.JetStream = true
	opts.StoreDir = cfg.DataDir
	opts.NoSigs = true
	opts.NoLog = !cfg.Logging
	if cfg.MaxPayload > 0 {
		opts.MaxPayload = cfg.MaxPayload
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsserver: %w", err)
	}
	failures := &startFailures{fatal: make(chan string, 1)}
	if cfg.Logging {
		ns.ConfigureLogger()
	} else {
		// Unlogged, a server that cannot start (its port taken, its store
		// unusable) says why only to its logger: this one keeps it.
		ns.SetLoggerV2(failures, false, false, false)
	}
	ns.Start()
	if err := failures.wait(ns, 30*time.Second); err != nil {
		ns.Shutdown()
		return nil, err
	}
	return &Server{Server: ns}, nil
}

// startFailures is the logger of a server that logs nothing: it keeps the
// fatal error that stops the server from starting, and drops the rest.
type startFailures struct {
	fatal chan string
}

func (f *startFailures) Fatalf(format string, v ...any) {
	select {
	case f.fatal <- fmt.Sprintf(format, v...):
	default:
	}
}

func (*startFailures) Noticef(string, ...any) {}
func (*startFailures) Warnf(string, ...any)   {}
func (*startFailures) Errorf(string, ...any)  {}
func (*startFailures) Debugf(string, ...any)  {}
func (*startFailures) Tracef(string, ...any)  {}

// wait waits until the server takes connections, or says why it will not,
// for at most bound.
func (f *startFailures) wait(ns *server.Server, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		select {
		case msg := <-f.fatal:
			return &StartError{Message: msg, PortTaken: strings.Contains(msg, "Error listening on port") && strings.Contains(msg, "address already in use")}
		default:
		}
		if ns.ReadyForConnections(100 * time.Millisecond) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("natsserver: server did not become ready within %v", bound)
		}
	}
}

// StartError is why the server did not start, as the server said it.
type StartError struct {
	Message string
	// PortTaken is set when another process listens on the server's port.
	PortTaken bool
}

func (e *StartError) Error() string { return "natsserver: " + e.Message }

// Is makes a taken port match syscall.EADDRINUSE, as a listener's error does.
func (e *StartError) Is(target error) bool { return e.PortTaken && target == syscall.EADDRINUSE }

// URL returns the client URL to connect to.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
	if s.unlock != nil {
		s.unlock()
	}
}
