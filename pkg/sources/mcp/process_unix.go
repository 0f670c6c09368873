//go:build unix

package mcp

import "syscall"

// killGroup kills every process of the group that the server leads.
func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

// terminateGroup asks every process of the server's group to stop.
func terminateGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGTERM) }
