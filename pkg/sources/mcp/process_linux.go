package mcp

import "syscall"

// processAttributes puts the server in a process group of its own, and has
// the kernel kill it should the worker die without stopping it.
func processAttributes() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
