//go:build !unix

package setup

// lockDir does not lock where flock is missing: run one change at a time.
func lockDir(string) (func(), error) { return func() {}, nil }
