package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started; nothing it started may outlive it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
