package worker_test

import (
	"testing"

	"github.com/toolbus/toolbus/internal/dev/testenv/leaks"
)

// Every test stops what it started; nothing it started may outlive it.
func TestMain(m *testing.M) {
	leaks.Main(m)
}
