// Package instance names the processes of a deployment.
package instance

import (
	"os"
	"regexp"

	"github.com/nats-io/nuid"
)

var unsafeIDChars = regexp.MustCompile(`[^A-Za-z0-9_=-]+`)

// ID returns an ID for a process on this host: the host name, cut to 40
// characters of those an ID may hold (or kind when there is none), and a
// random suffix, so that processes on one host differ.
func ID(kind string) string {
	host, _ := os.Hostname()
	host = unsafeIDChars.ReplaceAllString(host, "_")
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = kind
	}
	return host + "-" + nuid.Next()[12:]
}
