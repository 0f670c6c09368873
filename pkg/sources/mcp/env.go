package mcp

import (
	"os"
	"runtime"
	"strings"
)

// InheritedEnv lists the variables of the worker's environment that a stdio
// server inherits, as the official MCP SDKs do: enough to find programs and
// a home directory, and nothing that could hold a secret. Everything else
// the server needs is given in Config.Env or named in Config.InheritEnv.
func InheritedEnv() []string {
	if runtime.GOOS == "windows" {
		return []string{"APPDATA", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT", "PROCESSOR_ARCHITECTURE",
			"PROGRAMFILES", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "USERNAME", "USERPROFILE"}
	}
	return []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"}
}

// serverEnv is the environment a stdio server starts with: the inherited
// variables that are set in the worker's environment, then cfg.Env, whose
// entries win.
func serverEnv(cfg *Config) []string {
	var env []string
	for _, list := range [][]string{InheritedEnv(), cfg.InheritEnv} {
		for _, name := range list {
			v, ok := os.LookupEnv(name)
			// A value that starts with "()" is a shell function exported by
			// bash, which the SDKs leave out as well.
			if !ok || strings.HasPrefix(v, "()") {
				continue
			}
			env = append(env, name+"="+v)
		}
	}
	return append(env, cfg.Env...)
}
