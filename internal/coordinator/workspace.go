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

// watchFiles calls reload whenever the fingerprint of watched files
// changes. A reload that fails is reported and what was loaded stays in
// force; the same files are not tried again until they change.
func (c *Coordinator) watchFiles(ctx context.Context, what, path, fingerprint string, current func() (string, error), reload func() (string, error)) {
	defer c.bg.Done()
	t := time.NewTicker(c.cfg.WorkspaceReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fp, err := current()
		if err != nil {
			c.log.Error(what+" unreadable; keeping the loaded one", "path", path, "error", err)
			continue
		}
		if fp == fingerprint {
			continue
		}
		fingerprint = fp
		summary, err := reload()
		if err != nil {
			c.log.Error(what+" invalid; keeping the loaded one", "path", path, "error", err)
			continue
		}
		c.log.Info(what+" reloaded", "path", path, "loaded", summary)
	}
}

// watchWorkspace reloads the exposure workspace when its files change.
func (c *Coordinator) watchWorkspace(ctx context.Context, fingerprint string) {
	dir := c.cfg.WorkspaceDir
	c.watchFiles(ctx, "workspace", dir, fingerprint,
		func() (string, error) { return workspaceFingerprint(dir) },
		func() (string, error) {
			ws, err := exposure.LoadWorkspace(os.DirFS(dir))
			if err != nil {
				return "", err
			}
			c.resolver.SetWorkspace(ws)
			return fmt.Sprintf("%d bundles", len(ws.Bundles())), nil
		})
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

// watchPolicy reloads the policy file when it changes. Approvals asked
// under the old policy can no longer be approved: its version changed.
func (c *Coordinator) watchPolicy(ctx context.Context, fingerprint string) {
	file := c.cfg.PolicyFile
	c.watchFiles(ctx, "policy", file, fingerprint,
		func() (string, error) {
			data, err := os.ReadFile(file)
			if err != nil {
				return "", err
			}
			sum := sha256.Sum256(data)
			return hex.EncodeToString(sum[:]), nil
		},
		func() (string, error) {
			p, _, err := loadPolicy(file)
			if err != nil {
				return "", err
			}
			c.policy.Store(p)
			return "version " + p.Version(), nil
		})
}
