package main

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup keeps a terminal's Ctrl-C from reaching the process
// (toolbus up stops its processes itself, in order), and has the kernel
// stop it should toolbus up itself be killed.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
