package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestImagesAreReproducibleAndRunAsNonRoot builds the images twice, as
// docs/operations.md ("Containers") says, and holds them to what it
// promises: the same digests and bytes both times; each image's
// configuration runs its entrypoint as uid 65532 with the labels; the
// programs are static and start (their --help, run from the image's own
// files as its configuration says); the CA certificates parse.
func TestImagesAreReproducibleAndRunAsNonRoot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every program twice")
	}
	if raceDetector {
		// It runs no goroutine of its own: scripts/test.sh runs it without.
		t.Skip("the race detector makes it take minutes: run it without -race")
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	build := func() []Image {
		opts := Options{Out: t.TempDir(), Version: "1.2.3-test", Revision: "0123456789abcdef0123456789abcdef01234567", Created: created}
		images, err := Build(opts)
		if err != nil {
			t.Fatal(err)
		}
		return images
	}
	first, second := build(), build()
	if len(first) != 2 || len(second) != 2 {
		t.Fatalf("want 2 images each time, got %d and %d", len(first), len(second))
	}
	for i := range first {
		a, b := first[i], second[i]
		if a.Ref != b.Ref || a.Digest != b.Digest {
			t.Errorf("built twice, %s is %s then %s %s", a.Ref, a.Digest, b.Ref, b.Digest)
		}
		if da, db := mustFileDigest(t, a.Tarball), mustFileDigest(t, b.Tarball); da != db {
			t.Errorf("built twice, %s's tarball is %s then %s", a.Name, da, db)
		}
		if ia, ib := mustRead(t, filepath.Join(a.Layout, "index.json")), mustRead(t, filepath.Join(b.Layout, "index.json")); !bytes.Equal(ia, ib) {
			t.Errorf("built twice, %s's OCI index differs:\n%s\n%s", a.Name, ia, ib)
		}
	}
	// Each tarball names its image by the version's tag, then latest: in
	// that order every time, or two builds' tarballs differ.
	for _, images := range [][]Image{first, second} {
		for _, img := range images {
			m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(img.Tarball) })
			if err != nil {
				t.Fatalf("%s: %v", img.Tarball, err)
			}
			want := []string{img.Ref, strings.SplitN(img.Ref, ":", 2)[0] + ":latest"}
			if len(m) != 1 || !slices.Equal(m[0].RepoTags, want) {
				t.Errorf("%s's manifest.json: %+v, want one image tagged %q", img.Name, m, want)
			}
		}
	}

	want := map[string]struct {
		ref, version string
		programs     []string
	}{
		"toolbus":     {"toolbus/toolbus:1.2.3-test", "1.2.3-test", []string{"toolbus", "coordinator", "worker", "indexer"}},
		"nats-server": {"toolbus/nats-server:" + strings.TrimPrefix(mustModuleVersion(t), "v"), strings.TrimPrefix(mustModuleVersion(t), "v"), []string{"nats-server"}},
	}
	for _, built := range first {
		w, ok := want[built.Name]
		if !ok {
			t.Errorf("unexpected image %s", built.Name)
			continue
		}
		t.Run(built.Name, func(t *testing.T) {
			if built.Ref != w.ref {
				t.Errorf("ref %s, want %s", built.Ref, w.ref)
			}
			img := imageFromLayout(t, built)
			if err := validate.Image(img); err != nil {
				t.Fatalf("the layout's image is not valid: %v", err)
			}
			// The docker-archive holds the same image, under both tags: the
			// same configuration (its digest is the image ID docker and
			// podman show), so the same layers. It has no manifest of its own.
			configName, err := img.ConfigName()
			if err != nil {
				t.Fatal(err)
			}
			for _, tag := range []string{w.ref, strings.SplitN(w.ref, ":", 2)[0] + ":latest"} {
				ref, err := name.NewTag(tag, name.WeakValidation)
				if err != nil {
					t.Fatal(err)
				}
				fromTar, err := tarball.ImageFromPath(built.Tarball, &ref)
				if err != nil {
					t.Fatalf("%s in %s: %v", tag, built.Tarball, err)
				}
				if c, err := fromTar.ConfigName(); err != nil || c != configName {
					t.Errorf("%s in the tarball has configuration %s (%v), the layout's %s", tag, c, err, configName)
				}
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, cf, w.version, created)
			root, headers := extract(t, img)
			checkFiles(t, root, headers, w.programs)
			// The entrypoint with the image's default arguments (--help).
			run(t, root, append(slices.Clone(cf.Config.Entrypoint), cf.Config.Cmd...), cf.Config.Env)
			for _, p := range w.programs {
				run(t, root, []string{BinDir + "/" + p, "--help"}, cf.Config.Env)
			}
		})
	}
}

func checkConfig(t *testing.T, cf *v1.ConfigFile, version string, created time.Time) {
	t.Helper()
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if !cf.Created.Time.Equal(created) {
		t.Errorf("created %v, want %v", cf.Created.Time, created)
	}
	if len(cf.Config.Entrypoint) != 1 || !strings.HasPrefix(cf.Config.Entrypoint[0], BinDir+"/") {
		t.Errorf("entrypoint %q, want one program of %s", cf.Config.Entrypoint, BinDir)
	}
	if !slices.Equal(cf.Config.Cmd, []string{"--help"}) {
		t.Errorf("cmd %q, want [--help]", cf.Config.Cmd)
	}
	for _, env := range []string{"PATH=" + BinDir, "SSL_CERT_FILE=" + CertFile} {
		if !slices.Contains(cf.Config.Env, env) {
			t.Errorf("env %q lacks %s", cf.Config.Env, env)
		}
	}
	labels := cf.Config.Labels
	for key, value := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
		"org.opencontainers.image.source":   Source,
	} {
		if labels[key] != value {
			t.Errorf("label %s = %q, want %q", key, labels[key], value)
		}
	}
	for _, key := range []string{"org.opencontainers.image.title", "org.opencontainers.image.description"} {
		if labels[key] == "" {
			t.Errorf("label %s is missing", key)
		}
	}
}

// extract writes the image's files into a directory, and returns it with
// the files' tar headers (their owners and modes) by path in the image.
func extract(t *testing.T, img v1.Image) (string, map[string]*tar.Header) {
	t.Helper()
	root := t.TempDir()
	headers := map[string]*tar.Header{}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		headers["/"+strings.TrimSuffix(hdr.Name, "/")] = hdr
		path := filepath.Join(root, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, os.FileMode(hdr.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Errorf("%s: an entry of type %c; the images hold only files and directories", hdr.Name, hdr.Typeflag)
		}
	}
	return root, headers
}

func checkFiles(t *testing.T, root string, headers map[string]*tar.Header, programs []string) {
	t.Helper()
	passwd := string(mustRead(t, filepath.Join(root, "etc/passwd")))
	if !strings.Contains(passwd, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd names no user 65532:\n%s", passwd)
	}
	n := 0
	for rest := mustRead(t, filepath.Join(root, CertFile)); ; n++ {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("%s: certificate %d: %v", CertFile, n, err)
		}
	}
	if n < 100 {
		t.Errorf("%s holds %d certificates, want Mozilla's hundred and more", CertFile, n)
	}
	data := headers[DataDir]
	if data == nil || data.Uid != UID || data.Typeflag != tar.TypeDir {
		t.Errorf("%s is not a directory of uid %d: %+v", DataDir, UID, data)
	}
	if tmp := headers["/tmp"]; tmp == nil || tmp.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp is not world-writable with the sticky bit: %+v", tmp)
	}
	for _, p := range programs {
		path := filepath.Join(root, BinDir, p)
		hdr := headers[BinDir+"/"+p]
		if hdr == nil {
			t.Errorf("%s%s is missing", BinDir, p)
			continue
		}
		if hdr.Uid != 0 || hdr.Mode&0o022 != 0 {
			t.Errorf("%s is uid %d mode %o: the user must not be able to change it", p, hdr.Uid, hdr.Mode)
		}
		f, err := elf.Open(path)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked: the image has no libc", p)
			}
		}
		f.Close()
	}
}

// run runs a program of the extracted image as the image would: its path
// inside the image, the image's environment (PATH is the image's, which
// only the extracted copy has here).
func run(t *testing.T, root string, argv, env []string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, argv[0]), argv[1:]...)
	cmd.Env = env
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%q: %v\n%s", argv, err, out)
		return
	}
	if !strings.Contains(strings.ToLower(string(out)), "usage") {
		t.Errorf("%q printed no usage:\n%s", argv, out)
	}
}

func imageFromLayout(t *testing.T, built Image) v1.Image {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(built.Layout)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s holds %d manifests, want 1", built.Layout, len(m.Manifests))
	}
	if got := m.Manifests[0].Digest.String(); got != built.Digest {
		t.Errorf("the layout's image is %s, Build said %s", got, built.Digest)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func mustModuleVersion(t *testing.T) string {
	t.Helper()
	v, err := moduleVersion("github.com/nats-io/nats-server/v2")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustFileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func TestVersionMustBeATag(t *testing.T) {
	for _, bad := range []string{"", "-x", ".x", "a/b", "a:b", strings.Repeat("a", 129)} {
		if _, err := Build(Options{Out: t.TempDir(), Version: bad}); err == nil || !strings.Contains(err.Error(), "cannot be a tag") {
			t.Errorf("version %q: %v, want it refused as a tag", bad, err)
		}
	}
}

// TestArchiveKeepsItsTagsInOrder: a docker-archive names its image by the
// tags given, in their order, and the same image and tags make the same
// bytes every time.
func TestArchiveKeepsItsTagsInOrder(t *testing.T) {
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	version, err := name.NewTag("toolbus/toolbus:1.2.3", name.WeakValidation)
	if err != nil {
		t.Fatal(err)
	}
	latest, err := name.NewTag("toolbus/toolbus:latest", name.WeakValidation)
	if err != nil {
		t.Fatal(err)
	}
	for _, tags := range [][]name.Tag{{version, latest}, {latest, version}} {
		want := []string{tags[0].String(), tags[1].String()}
		var first string
		for i := range 20 {
			path := filepath.Join(t.TempDir(), "image.tar")
			if err := writeArchive(path, img, tags); err != nil {
				t.Fatal(err)
			}
			m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != 1 || !slices.Equal(m[0].RepoTags, want) {
				t.Fatalf("write %d: manifest.json %+v, want one image tagged %q", i, m, want)
			}
			if d := mustFileDigest(t, path); first == "" {
				first = d
			} else if d != first {
				t.Fatalf("write %d: the archive is %s, the first was %s", i, d, first)
			}
			for _, tag := range tags {
				got, err := tarball.ImageFromPath(path, &tag)
				if err != nil {
					t.Fatalf("%s: %v", tag, err)
				}
				if gd, _ := got.Digest(); gd != mustDigest(t, img) {
					t.Fatalf("%s in the archive is %s, want %s", tag, gd, mustDigest(t, img))
				}
			}
		}
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
