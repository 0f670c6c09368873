package mcp

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// stderrLines is how many of its last standard error lines a server's
// failure reports.
const stderrLines = 20

// process is one run of a stdio server, in a process group of its own. The
// worker holds one end of each of its three pipes; nothing copies between
// them, so no goroutine of ours waits on a child that inherited them.
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // written by the transport
	stdout *os.File // read by the transport
	// exited is closed once the server has exited and its group was killed.
	exited chan struct{}
	err    error // why it exited; read after exited is closed

	mu         sync.Mutex
	tail       []string      // the last lines of its standard error
	stderrDone chan struct{} // closed when its standard error has ended
}

// startProcess starts the server. Its standard error is logged line by line
// at debug level and its last lines are kept for error messages.
func startProcess(cfg *Config, log *slog.Logger) (*process, error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Env = serverEnv(cfg)
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.SysProcAttr = processAttributes()
	if err := cmd.Start(); err != nil {
		closeAll()
		// The exec error names the command whichever of the two is missing.
		if cfg.Dir != "" {
			if info, serr := os.Stat(cfg.Dir); serr != nil {
				return nil, fmt.Errorf("start %s: its directory %s: %w", cfg.Command, cfg.Dir, serr)
			} else if !info.IsDir() {
				return nil, fmt.Errorf("start %s: its directory %s is not a directory", cfg.Command, cfg.Dir)
			}
		}
		return nil, fmt.Errorf("start %s: %w", cfg.Command, err)
	}
	// The child has its own copies now; ours would keep the pipes open after it exits.
	inR.Close()
	outW.Close()
	errW.Close()
	p := &process{cmd: cmd, stdin: inW, stdout: outR, exited: make(chan struct{}), stderrDone: make(chan struct{})}
	go p.readStderr(errR, log)
	go func() {
		p.err = cmd.Wait()
		if p.err == nil {
			p.err = errors.New("exited")
		}
		killGroup(cmd.Process.Pid)
		// Its last words explain the exit; a process that escaped the group
		// may hold the pipe open, so they are not awaited for long.
		select {
		case <-p.stderrDone:
		case <-time.After(time.Second):
		}
		close(p.exited)
	}()
	return p, nil
}

func (p *process) readStderr(r *os.File, log *slog.Logger) {
	defer close(p.stderrDone)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		log.Debug("server stderr", "line", line)
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > stderrLines {
			p.tail = p.tail[len(p.tail)-stderrLines:]
		}
		p.mu.Unlock()
	}
}

// PID returns the process ID of the server, which is also its group's ID.
func (p *process) PID() int { return p.cmd.Process.Pid }

// stderrTail returns the last lines the server wrote to standard error.
func (p *process) stderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// exitError describes how the server ended, with its last words.
func (p *process) exitError() error {
	<-p.exited
	if tail := p.stderrTail(); tail != "" {
		return fmt.Errorf("server process %d: %w; its last output:\n%s", p.PID(), p.err, tail)
	}
	return fmt.Errorf("server process %d: %w", p.PID(), p.err)
}

// stopGrace is how long a server has to exit after its standard input closed.
const stopGrace = 2 * time.Second

// stop ends the server: it closes its standard input, which well-behaved
// servers take as the end, then terminates and finally kills its group.
// It returns once the server has exited and its group is gone.
func (p *process) stop() {
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(stopGrace):
		terminateGroup(p.PID())
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
			killGroup(p.PID())
			<-p.exited
		}
	}
	p.stdout.Close()
}
