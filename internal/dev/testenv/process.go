package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildMu sync.Mutex
	// buildDir holds what Binary built, serverDir what NATSServerBinary did.
	buildDir, serverDir string
)

// Binary returns the path of a command of this module, "./cmd/NAME". The
// first call builds every command at once, which is faster than one by one.
// Call CleanupBinaries from TestMain.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	buildInto(t, &buildDir, "toolbus-bin-", "the commands", "", "./cmd/...")
	path := filepath.Join(buildDir, filepath.Base(pkg))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no command %s: %v", pkg, err)
	}
	return path
}

// NATSServerBinary returns the path of a nats-server built from the
// module's own dependency, so that it is the version the embedded server
// is. It is built once per test binary, without the test's -race: the
// point of running it as a process is that its own data races are not
// the test's. Call CleanupBinaries from TestMain.
func NATSServerBinary(t testing.TB) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	buildInto(t, &serverDir, "toolbus-nats-server-", "nats-server", "nats-server", "github.com/nats-io/nats-server/v2")
	return filepath.Join(serverDir, "nats-server")
}

// buildInto builds pkg, from the module root, into a new temporary
// directory named like pattern, as its file out (empty: each command
// under its own name), once: *dir is empty until it has. buildMu must be
// held.
func buildInto(t testing.TB, dir *string, pattern, what, out, pkg string) {
	t.Helper()
	if *dir != "" {
		return
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", d+string(filepath.Separator)+out, pkg)
	cmd.Dir = moduleRoot(t)
	if output, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(d)
		t.Fatalf("build %s: %v\n%s", what, err, output)
	}
	*dir = d
}

// CleanupBinaries removes what Binary and NATSServerBinary built.
func CleanupBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, dir := range []string{buildDir, serverDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
}

func moduleRoot(t testing.TB) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// Process is a running command whose output lines a test can wait for.
type Process struct {
	Cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	mu    sync.Mutex
	log   []string
}

// Start runs a binary, collecting its standard output and error line by
// line. The process is killed when the test ends if it still runs.
func Start(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &Process{Cmd: cmd, lines: make(chan string, 4096), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log = append(p.log, line)
			p.mu.Unlock()
			select {
			case p.lines <- line:
			default:
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		<-read // everything printed is in the log before done closes
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("output of %s:\n%s", filepath.Base(bin), p.Output())
		}
	})
	return p
}

// WaitLine waits for an output line that contains substr and returns it.
func (p *Process) WaitLine(t testing.TB, substr string) string {
	t.Helper()
	timeout := time.After(Patience)
	for {
		select {
		case line := <-p.lines:
			if strings.Contains(line, substr) {
				return line
			}
		case <-p.done:
			for {
				select {
				case line := <-p.lines:
					if strings.Contains(line, substr) {
						return line
					}
				default:
					t.Fatalf("process exited before printing %q:\n%s", substr, p.Output())
				}
			}
		case <-timeout:
			t.Fatalf("no line with %q within %v:\n%s", substr, Patience, p.Output())
		}
	}
}

// Output returns everything the process printed so far.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// Kill ends the process at once, as a crash would.
func (p *Process) Kill() {
	if p.Cmd.Process != nil {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	}
}

// Interrupt asks the process to stop and waits until it has.
func (p *Process) Interrupt(t testing.TB) error {
	t.Helper()
	_ = p.Cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
		if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
			return fmt.Errorf("exit status %d", code)
		}
		return nil
	case <-time.After(Patience):
		t.Fatalf("process did not stop within %v:\n%s", Patience, p.Output())
		return nil
	}
}

// Wait waits for the process to exit.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
			return fmt.Errorf("exit status %d", code)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
