//go:build unix && !linux

package mcp

import "syscall"

// processAttributes puts the server in a process group of its own.
func processAttributes() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
