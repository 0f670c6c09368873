// Command images builds Toolbus's container images without a container
// engine: static binaries of this module on an empty base, written as OCI
// image layouts and as tarballs that docker load and podman load read.
//
//	go run ./scripts/images [--out DIR] [--arch GOARCH] [--version V] [--revision R] [--created T]
//
// Two images come out, each tagged with its version and latest:
//
//	toolbus/toolbus      toolbus (its entrypoint), coordinator, worker and indexer
//	toolbus/nats-server  the nats-server of the version go.mod requires
//
// One image holds the four Toolbus programs: they share no code a layer
// could hold once (each is a static binary), so one image per program would
// only make every node pull four images instead of one; and a container's
// health check runs toolbus health, which every Toolbus container then has.
//
// Built twice from the same commit, the images are the same, byte for byte:
// the binaries are built with -trimpath, every file of a layer has the
// commit's time, and the certificates come from a module go.sum pins.
// docs/operations.md, "Containers", says how to load, run and push them.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The user every image runs as: not root, and the uid distroless and
// Chainguard images call nonroot.
const (
	UID      = 65532
	UserName = "nonroot"
	// DataDir is the directory, owned by the user, where an installation
	// lives in a container (docs/operations.md, "Containers").
	DataDir = "/var/lib/toolbus"
	// BinDir holds the programs; PATH names it.
	BinDir = "/usr/local/bin"
	// CertFile is the CA bundle; SSL_CERT_FILE names it too.
	CertFile = "/etc/ssl/certs/ca-certificates.crt"
	// Source is the project's address, in the images' labels.
	Source = "https://github.com/toolbus/toolbus"
)

// Options say what to build.
type Options struct {
	// Out is the directory the images are written to.
	Out string
	// Arch is the GOARCH of the binaries; the images are linux/Arch.
	Arch string
	// Version and Revision label the images (org.opencontainers.image.version
	// and .revision); Version is also the toolbus image's tag.
	Version  string
	Revision string
	// Created is the time of every file and of the images' configuration.
	Created time.Time
	// Repository prefixes the images' names: REPOSITORY/toolbus:VERSION.
	Repository string
	// Log receives progress; nil is silent.
	Log io.Writer
}

// Image is one image built.
type Image struct {
	// Name is the image's short name: toolbus, nats-server.
	Name string
	// Ref is its name and tag: REPOSITORY/NAME:TAG.
	Ref string
	// Digest is the manifest's digest, what a registry names it by.
	Digest string
	// Layout is its OCI image layout directory, Tarball its docker-archive.
	Layout  string
	Tarball string
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
	opts.Log = os.Stderr
	images, err := Build(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, img := range images {
		fmt.Printf("%s %s\n  OCI layout: %s\n  docker load -i %s\n", img.Ref, img.Digest, img.Layout, img.Tarball)
	}
}

func parseFlags(args []string) (Options, error) {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./scripts/images [flags]\n\nBuilds the toolbus and nats-server images as OCI layouts and docker-archive tarballs.\n\n")
		fs.PrintDefaults()
	}
	out := fs.String("out", "dist/images", "directory to write the images to")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the binaries (the images are linux/GOARCH)")
	version := fs.String("version", "", "the images' version label and the toolbus image's tag (default: git describe --tags --always --dirty, else dev)")
	revision := fs.String("revision", "", "the images' revision label (default: git rev-parse HEAD, else unknown)")
	created := fs.String("created", "", "RFC 3339 time of the files and images (default: $SOURCE_DATE_EPOCH, else the commit's time, else 1970-01-01)")
	repo := fs.String("repository", "toolbus", "repository prefix of the images' names")
	if err := fs.Parse(args); err != nil {
		return Options{}, err
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("no arguments are taken (got %q)", fs.Args())
	}
	opts := Options{Out: *out, Arch: *arch, Version: *version, Revision: *revision, Repository: *repo}
	if opts.Version == "" {
		opts.Version = gitOr("dev", "describe", "--tags", "--always", "--dirty")
	}
	if opts.Revision == "" {
		opts.Revision = gitOr("unknown", "rev-parse", "HEAD")
	}
	switch {
	case *created != "":
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			return Options{}, fmt.Errorf("--created %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", *created)
		}
		opts.Created = t
	case os.Getenv("SOURCE_DATE_EPOCH") != "":
		sec, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
		if err != nil {
			return Options{}, fmt.Errorf("$SOURCE_DATE_EPOCH %q is not a number of seconds", os.Getenv("SOURCE_DATE_EPOCH"))
		}
		opts.Created = time.Unix(sec, 0)
	default:
		sec, err := strconv.ParseInt(gitOr("0", "log", "-1", "--format=%ct"), 10, 64)
		if err != nil {
			sec = 0
		}
		opts.Created = time.Unix(sec, 0)
	}
	return opts, nil
}

func gitOr(fallback string, args ...string) string {
	out, err := exec.Command("git", args...).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return fallback
	}
	return string(bytes.TrimSpace(out))
}

// program is a binary of an image: where it is built from.
type program struct {
	name, pkg string
}

// imageSpec is what one image holds.
type imageSpec struct {
	name     string
	title    string
	desc     string
	programs []program
	// entrypoint is the program the image runs; cmd its default arguments.
	entrypoint string
	cmd        []string
	// dirs are directories the user owns.
	dirs []string
	// version overrides Options.Version (the NATS server's own).
	version string
}

// Build builds the images into opts.Out, replacing what is there.
func Build(opts Options) ([]Image, error) {
	if opts.Out == "" {
		return nil, errors.New("the output directory is required (--out)")
	}
	if opts.Arch == "" {
		opts.Arch = runtime.GOARCH
	}
	if opts.Repository == "" {
		opts.Repository = "toolbus"
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := validTag(opts.Version); err != nil {
		return nil, err
	}
	natsVersion, err := moduleVersion("github.com/nats-io/nats-server/v2")
	if err != nil {
		return nil, err
	}
	specs := []imageSpec{
		{
			name: "toolbus", title: "Toolbus",
			desc: "Toolbus: the command line, console and MCP front (toolbus), the coordinator, the worker and the indexer",
			programs: []program{
				{"toolbus", "./cmd/toolbus"}, {"coordinator", "./cmd/coordinator"},
				{"worker", "./cmd/worker"}, {"indexer", "./cmd/indexer"},
			},
			entrypoint: "toolbus", cmd: []string{"--help"},
			dirs: []string{DataDir},
		},
		{
			name: "nats-server", title: "NATS server",
			desc:     "The NATS server Toolbus is built and tested with, from github.com/nats-io/nats-server/v2 " + natsVersion,
			programs: []program{{"nats-server", "github.com/nats-io/nats-server/v2"}},
			// Like the official image: the configuration is the arguments.
			entrypoint: "nats-server", cmd: []string{"--help"},
			dirs:    []string{DataDir, "/data"},
			version: strings.TrimPrefix(natsVersion, "v"),
		},
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "toolbus-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)
	var pkgs []string
	for _, s := range specs {
		for _, p := range s.programs {
			pkgs = append(pkgs, p.pkg)
		}
	}
	fmt.Fprintf(opts.Log, "building %s for linux/%s\n", strings.Join(pkgs, " "), opts.Arch)
	if err := goBuild(root, binDir, opts.Arch, pkgs); err != nil {
		return nil, err
	}
	base, err := baseLayer(opts.Created)
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, s := range specs {
		img, err := buildImage(s, opts, binDir, base)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.name, err)
		}
		out = append(out, img)
		fmt.Fprintf(opts.Log, "%s %s\n", img.Ref, img.Digest)
	}
	var digests strings.Builder
	for _, img := range out {
		fmt.Fprintf(&digests, "%s@%s\n", img.Ref, img.Digest)
	}
	if err := os.WriteFile(filepath.Join(opts.Out, "digests.txt"), []byte(digests.String()), 0o644); err != nil {
		return nil, err
	}
	return out, nil
}

// validTag: the version is a tag (docker's grammar).
func validTag(v string) error {
	if v == "" || len(v) > 128 || strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" || strings.ContainsAny(v[:1], ".-") {
		return fmt.Errorf("version %q cannot be a tag: 1 to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'", v)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run it inside the Toolbus module")
	}
	return filepath.Dir(mod), nil
}

// moduleVersion is the version of a module in this module's build list.
func moduleVersion(path string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", path).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", path, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// goBuild builds static binaries of pkgs into dir: no cgo, no paths of this
// machine, no VCS stamp (the labels say the revision), no symbol tables.
func goBuild(root, dir, arch string, pkgs []string) error {
	args := append([]string{"build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}

// file is an entry of a layer.
type file struct {
	path     string // absolute, no trailing slash
	mode     int64
	dir      bool
	uid, gid int
	data     []byte
	source   string // read from here when data is nil
}

// layerOf writes files into a layer whose every entry has time t and
// whose compressed form is the same for the same files.
func layerOf(files []file, t time.Time) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{
			Name: strings.TrimPrefix(f.path, "/"), Mode: f.mode, Uid: f.uid, Gid: f.gid,
			ModTime: t.UTC(), Format: tar.FormatPAX,
		}
		if f.dir {
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			continue
		}
		data := f.data
		if data == nil {
			var err error
			if data, err = os.ReadFile(f.source); err != nil {
				return nil, err
			}
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// baseLayer is what every image shares: the directories, the users and the
// CA certificates.
func baseLayer(t time.Time) (v1.Layer, error) {
	certs, err := caBundle()
	if err != nil {
		return nil, err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", UserName, UID, UID, UserName, UserName)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, UID)
	files := []file{
		{path: "/etc", mode: 0o755, dir: true},
		{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "/etc/group", mode: 0o644, data: []byte(group)},
		{path: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{path: "/etc/ssl", mode: 0o755, dir: true},
		{path: "/etc/ssl/certs", mode: 0o755, dir: true},
		{path: CertFile, mode: 0o644, data: certs},
		{path: "/home", mode: 0o755, dir: true},
		{path: "/home/" + UserName, mode: 0o700, dir: true, uid: UID, gid: UID},
		{path: "/tmp", mode: 0o1777, dir: true},
		{path: "/usr", mode: 0o755, dir: true},
		{path: "/usr/local", mode: 0o755, dir: true},
		{path: BinDir, mode: 0o755, dir: true},
		{path: "/var", mode: 0o755, dir: true},
		{path: "/var/lib", mode: 0o755, dir: true},
	}
	return layerOf(files, t)
}

// caBundle is Mozilla's trust store as golang.org/x/crypto/x509roots
// holds it, in PEM: the version go.sum pins, so every build has the same.
// Roots with constraints PEM cannot say (a distrust date) are left out.
func caBundle() ([]byte, error) {
	var b bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("the CA bundle is empty")
	}
	return b.Bytes(), nil
}

func buildImage(s imageSpec, opts Options, binDir string, base v1.Layer) (Image, error) {
	version := opts.Version
	if s.version != "" {
		version = s.version
	}
	var files []file
	for _, d := range s.dirs {
		files = append(files, file{path: d, mode: 0o700, dir: true, uid: UID, gid: UID})
	}
	for _, p := range s.programs {
		files = append(files, file{path: BinDir + "/" + p.name, mode: 0o755, source: filepath.Join(binDir, p.name)})
	}
	programs, err := layerOf(files, opts.Created)
	if err != nil {
		return Image{}, err
	}
	var names []string
	for _, p := range s.programs {
		names = append(names, p.name)
	}
	created := v1.Time{Time: opts.Created.UTC()}
	img, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "scripts/images: users, directories, CA certificates", Comment: "base"}},
		mutate.Addendum{Layer: programs, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "scripts/images: go build -trimpath " + strings.Join(names, " "), Comment: s.name}},
	)
	if err != nil {
		return Image{}, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = opts.Arch, "linux"
	cf.Created = created
	labels := map[string]string{
		"org.opencontainers.image.title":       s.title,
		"org.opencontainers.image.description": s.desc,
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    opts.Revision,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.url":         Source,
		"org.opencontainers.image.vendor":      "Toolbus",
	}
	if s.name == "nats-server" {
		labels["org.opencontainers.image.licenses"] = "Apache-2.0"
		labels["org.opencontainers.image.url"] = "https://github.com/nats-io/nats-server"
	}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint: []string{BinDir + "/" + s.entrypoint},
		Cmd:        s.cmd,
		Env:        []string{"PATH=" + BinDir, "SSL_CERT_FILE=" + CertFile, "HOME=/home/" + UserName},
		WorkingDir: "/home/" + UserName,
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return Image{}, err
	}
	ref := fmt.Sprintf("%s/%s:%s", opts.Repository, s.name, version)
	tag, err := name.NewTag(ref, name.WeakValidation)
	if err != nil {
		return Image{}, fmt.Errorf("name %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Image{}, err
	}
	out := Image{Name: s.name, Ref: ref, Digest: digest.String(),
		Layout: filepath.Join(opts.Out, s.name), Tarball: filepath.Join(opts.Out, s.name+".tar")}
	if err := os.RemoveAll(out.Layout); err != nil {
		return Image{}, err
	}
	p, err := layout.Write(out.Layout, empty.Index)
	if err != nil {
		return Image{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
		"io.containerd.image.name":          ref,
	})); err != nil {
		return Image{}, err
	}
	latest, err := name.NewTag(fmt.Sprintf("%s/%s:latest", opts.Repository, s.name), name.WeakValidation)
	if err != nil {
		return Image{}, err
	}
	if err := writeArchive(out.Tarball, img, []name.Tag{tag, latest}); err != nil {
		return Image{}, err
	}
	return out, nil
}

// writeArchive writes img as a docker-archive, what docker load and podman
// load read, under tags in their order: go-containerregistry's
// tarball.MultiRefWrite orders an image's tags as it ranges over a map, so
// two builds' tarballs would differ.
func writeArchive(path string, img v1.Image, tags []name.Tag) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	entry := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: size, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if err := entry(configName.String(), int64(len(config)), bytes.NewReader(config)); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	desc := tarball.Descriptor{Config: configName.String()}
	for _, t := range tags {
		desc.RepoTags = append(desc.RepoTags, t.String())
	}
	for _, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		file := digest.Hex + ".tar.gz" // the layers are gzip-compressed (types.OCILayer)
		err = entry(file, size, rc)
		rc.Close()
		if err != nil {
			return err
		}
		desc.Layers = append(desc.Layers, file)
	}
	manifest, err := json.Marshal(tarball.Manifest{desc})
	if err != nil {
		return err
	}
	if err := entry("manifest.json", int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return err
	}
	return tw.Close()
}
