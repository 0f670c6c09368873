// Package natsserver runs a NATS server with JetStream inside the process:
// the all-in-one mode's server and the one every test talks to.
package natsserver

import (
	"errors"
	"fmt"
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
}

// Start starts a server and waits until it accepts connections.
func Start(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("natsserver: DataDir is required")
	}
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
	if cfg.Logging {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("natsserver: server did not become ready within 30s")
	}
	return &Server{Server: ns}, nil
}

// URL returns the client URL to connect to.
func (s *Server) URL() string { return s.ClientURL() }

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}
