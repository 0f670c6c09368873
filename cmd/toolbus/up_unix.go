//go:build unix && !linux

package main

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup keeps a terminal's Ctrl-C from reaching the process:
// toolbus up stops its processes itself, in order.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
