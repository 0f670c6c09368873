package testenv

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts returns n different loopback ports that nothing listened on a
// moment ago, for a server that must be told its port before it starts,
// or keep it across restarts. Each is held until all are chosen, so that
// the kernel does not hand one out twice.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// FreePort returns one loopback port that nothing listened on a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreeAddress is a FreePort as a host:port address on the loopback
// interface: an address to start a server on, or one that nothing answers.
func FreeAddress(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}
