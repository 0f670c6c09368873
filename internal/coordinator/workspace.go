package coordinator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/toolbus/toolbus/pkg/exposure"
	"github.com/toolbus/toolbus/pkg/policy"
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

// watchPolicy reloads the policy file when it changes. An invalid file is
// reported and the policy in force stays. Approvals asked under the old
// policy can no longer be approved: its version changed.
func (c *Coordinator) watchPolicy(ctx context.Context, fingerprint string) {
	defer c.bg.Done()
	t := time.NewTicker(c.cfg.WorkspaceReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(c.cfg.PolicyFile)
		if err != nil {
			c.log.Error("policy unreadable; keeping the loaded one", "file", c.cfg.PolicyFile, "error", err)
			continue
		}
		sum := sha256.Sum256(data)
		if fp := hex.EncodeToString(sum[:]); fp == fingerprint {
			continue
		} else {
			fingerprint = fp
		}
		p, err := policy.Parse(data, filepath.Base(c.cfg.PolicyFile))
		if err != nil {
			c.log.Error("policy invalid; keeping the loaded one", "file", c.cfg.PolicyFile, "error", err)
			continue
		}
		c.policy.Store(p)
		c.log.Info("policy reloaded", "file", c.cfg.PolicyFile, "version", p.Version())
	}
}
