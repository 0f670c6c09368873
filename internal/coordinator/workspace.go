package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/toolbus/toolbus/pkg/exposure"
)

// loadWorkspace reads the exposure workspace (bundles/ and agents/ of YAML
// files). Without a directory the workspace is empty, and bundles are
// derived from the catalog, one per namespace.
func (c *Coordinator) loadWorkspace() (*exposure.Workspace, string, error) {
	if c.cfg.WorkspaceDir == "" {
		ws, err := exposure.NewWorkspace(nil, nil)
		return ws, "", err
	}
	fp, err := workspaceFingerprint(c.cfg.WorkspaceDir)
	if err != nil {
		return nil, "", err
	}
	ws, err := exposure.LoadWorkspace(os.DirFS(c.cfg.WorkspaceDir))
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

// watchWorkspace reloads the workspace when its files change. A workspace
// that fails to load is reported and the previous one stays in force.
func (c *Coordinator) watchWorkspace(ctx context.Context, fingerprint string) {
	defer c.bg.Done()
	t := time.NewTicker(c.cfg.WorkspaceReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp, err := workspaceFingerprint(c.cfg.WorkspaceDir)
		if err != nil {
			c.log.Error("workspace unreadable; keeping the loaded one", "dir", c.cfg.WorkspaceDir, "error", err)
			continue
		}
		if fp == fingerprint {
			continue
		}
		fingerprint = fp
		ws, err := exposure.LoadWorkspace(os.DirFS(c.cfg.WorkspaceDir))
		if err != nil {
			c.log.Error("workspace invalid; keeping the loaded one", "dir", c.cfg.WorkspaceDir, "error", err)
			continue
		}
		c.resolver.SetWorkspace(ws)
		c.log.Info("workspace reloaded", "dir", c.cfg.WorkspaceDir, "bundles", len(ws.Bundles()))
	}
}
