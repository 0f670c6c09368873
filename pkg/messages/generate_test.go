package messages

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedCodecIsCurrent runs the generator, as go generate does, into
// a temporary directory: msgpack_gen.go must be what it writes from the
// structs as they are now.
func TestGeneratedCodecIsCurrent(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "msgpack_gen.go")
	cmd := exec.Command("go", "run", "./internal/msgpackgen", "-o", out)
	if output, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./internal/msgpackgen: %v\n%s", err, output)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("msgpack_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("msgpack_gen.go is not what the generator writes from the message structs; run go generate ./pkg/messages")
	}
}
