package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"
	"time"

	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/policy"
)

// loadWorkspace reads the exposure workspace (bundles/ and agents/ of YAML
// files). Without a directory the workspace is empty, and bundles are
// derived from the catalog, one per namespace.
func loadWorkspace(dir string) (*exposure.Workspace, string, error) {
	if dir == "" {
		ws, err := exposure.NewWorkspace(nil, nil)
		return ws, "", err
	}
	fp, err := workspaceFingerprint(dir)
	if err != nil {
		return nil, "", err
	}
	ws, err := exposure.LoadWorkspace(os.DirFS(dir))
	return ws, fp, err
}

// workspaceFingerprint hashes the names and contents of the workspace's
// YAML files, so that any edit, even within one second, is seen.
func workspaceFingerprint(dir string) (string, error) {
	var files []string
	for _, sub := range []string{exposure.BundlesDir, exposure.AgentsDir} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil && !os.IsNotExist(err) {
			return "", err
		}
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(sub, e.Name()))
			}
		}
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		data, err := fs.ReadFile(os.DirFS(dir), filepath.ToSlash(f))
		if err != nil {
			return "", err
		}
		h.Write([]byte(f))
		h.Write([]byte{0})
		sum := sha256.Sum256(data)
		h.Write(sum[:])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// fileWatcher calls reload whenever the fingerprint of watched files
// changes. A reload that fails is reported and what was loaded stays in
// force; the same files are not tried again until they change.
type fileWatcher struct {
	what, path string
	interval   time.Duration
	// current returns the fingerprint of the files as they are now.
	current func() (string, error)
	// reload loads the files and puts them in force; it returns a summary
	// of what it loaded.
	reload func() (string, error)
	log    *slog.Logger
}

// start watches from the fingerprint of what is loaded, until stop.
func (w fileWatcher) start(fingerprint string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(ctx, fingerprint)
	}()
	return func() {
		cancel()
		<-done
	}
}

func (w fileWatcher) watch(ctx context.Context, fingerprint string) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp, err := w.current()
		if err != nil {
			w.log.Error(w.what+" unreadable; keeping the loaded one", "path", w.path, "error", err)
			continue
		}
		if fp == fingerprint {
			continue
		}
		fingerprint = fp
		summary, err := w.reload()
		if err != nil {
			w.log.Error(w.what+" invalid; keeping the loaded one", "path", w.path, "error", err)
			continue
		}
		w.log.Info(w.what+" reloaded", "path", w.path, "loaded", summary)
	}
}

// workspaceWatcher reloads the exposure workspace when its files change.
func workspaceWatcher(dir string, resolver *exposure.Resolver, interval time.Duration, log *slog.Logger) fileWatcher {
	return fileWatcher{
		what: "workspace", path: dir, interval: interval, log: log,
		current: func() (string, error) { return workspaceFingerprint(dir) },
		reload: func() (string, error) {
			ws, err := exposure.LoadWorkspace(os.DirFS(dir))
			if err != nil {
				return "", err
			}
			resolver.SetWorkspace(ws)
			return fmt.Sprintf("%d bundles", len(ws.Bundles())), nil
		},
	}
}

func loadPolicy(path string) (*policy.Policy, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("read policy: %w", err)
	}
	p, err := policy.Parse(data, filepath.Base(path))
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	return p, hex.EncodeToString(sum[:]), nil
}

// policyWatcher reloads the policy file when it changes, and calls
// reloaded once the new policy is in force. Approvals asked under the old
// policy can no longer be approved: its version changed.
func policyWatcher(file string, inForce *atomic.Pointer[policy.Policy], interval time.Duration, log *slog.Logger, reloaded func()) fileWatcher {
	return fileWatcher{
		what: "policy", path: file, interval: interval, log: log,
		current: func() (string, error) {
			data, err := os.ReadFile(file)
			if err != nil {
				return "", err
			}
			sum := sha256.Sum256(data)
			return hex.EncodeToString(sum[:]), nil
		},
		reload: func() (string, error) {
			p, _, err := loadPolicy(file)
			if err != nil {
				return "", err
			}
			inForce.Store(p)
			reloaded()
			return "version " + p.Version(), nil
		},
	}
}
