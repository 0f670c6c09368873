//go:build !unix

package mcp

import (
	"os"
	"syscall"
)

// processAttributes leaves the defaults: process groups are a Unix notion.
func processAttributes() *syscall.SysProcAttr { return nil }

// killGroup kills the server; children it started may outlive it.
func killGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}

func terminateGroup(pid int) { killGroup(pid) }
