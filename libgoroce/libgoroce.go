// Package libgoroce carries the C library that puts the libibverbs ABI in
// front of goroce's soft RDMA device (package uverbs), and builds it.
//
// A program runs on the device with the library preloaded:
//
//	LD_PRELOAD=$(roce device --lib) ib_write_bw
//
// The library's sources are embedded in the roce command, so any copy of
// it can build the library for the machine it runs on: Build compiles them
// with the system's C compiler against the system's <infiniband/verbs.h>
// (Debian's libibverbs-dev), so that every struct a program shares with
// the library has the layout of the headers the program was built with,
// and the layouts the library relies on are checked as it compiles.
package libgoroce

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

//go:embed src/*.c src/*.h src/*.map
var sources embed.FS

// Name is the file name of the built library.
const Name = "libgoroce.so"

// ErrNoCompiler means no C compiler was found.
var ErrNoCompiler = errors.New("libgoroce: no C compiler (install gcc: apt-get install gcc libibverbs-dev)")

// ErrNoHeaders means the compiler found no <infiniband/verbs.h>.
var ErrNoHeaders = errors.New("libgoroce: no <infiniband/verbs.h> (install libibverbs-dev)")

// Config says where and how Build builds. A nil *Config means the
// defaults.
type Config struct {
	// Dir is where the library goes: a directory of its own per version
	// of the sources and headers, under Dir. Default $GOROCE_LIB_DIR, or
	// the user's cache directory's goroce/.
	Dir string
	// CC is the C compiler; default $CC, else cc, else gcc.
	CC string
}

// Build returns the path of the library built from the embedded sources
// for this system's headers, building it first if it is not there yet.
// It is safe to call from several processes at once: each builds in a
// directory of its own and the first to finish puts its library in place.
func Build(cfg *Config) (string, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	cc, err := compiler(c.CC)
	if err != nil {
		return "", err
	}
	dir := c.Dir
	if dir == "" {
		dir = os.Getenv("GOROCE_LIB_DIR")
	}
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir = filepath.Join(cache, "goroce")
	}
	header, err := verbsHeader(cc)
	if err != nil {
		return "", err
	}
	key, err := digest(cc, header)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "lib-"+key, Name)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("libgoroce: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "build-")
	if err != nil {
		return "", fmt.Errorf("libgoroce: %w", err)
	}
	defer os.RemoveAll(tmp)
	files, err := writeSources(tmp)
	if err != nil {
		return "", err
	}
	if !hasHeader(cc, "rdma/rdma_cma.h") {
		// librdmacm's ABI (rdma_cm and rsockets) needs its headers
		// (librdmacm-dev); without them the library has libibverbs' alone.
		files = slices.DeleteFunc(files, func(f string) bool { b := filepath.Base(f); return b == "rdmacm.c" || b == "rsocket.c" })
	}
	lib := filepath.Join(tmp, Name)
	args := append([]string{"-shared", "-fPIC", "-O2", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
		"-Wno-format-truncation", "-fvisibility=hidden", "-o", lib}, files...)
	args = append(args, "-lpthread", "-Wl,--version-script="+filepath.Join(tmp, "libgoroce.map"), "-Wl,-z,defs")
	cmd := exec.Command(cc, args...)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &msg, &msg
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("libgoroce: %s %s: %w\n%s", cc, strings.Join(args, " "), err, msg.String())
	}
	if err := os.Rename(lib, out); err != nil {
		return "", fmt.Errorf("libgoroce: %w", err)
	}
	return out, nil
}

// compiler finds the C compiler.
func compiler(cc string) (string, error) {
	cands := []string{cc, os.Getenv("CC"), "cc", "gcc"}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", ErrNoCompiler
}

// verbsHeader returns the contents of the <infiniband/verbs.h> cc finds.
func verbsHeader(cc string) ([]byte, error) {
	cmd := exec.Command(cc, "-E", "-x", "c", "-")
	cmd.Stdin = strings.NewReader("#include <infiniband/verbs.h>\n#if __has_include(<rdma/rdma_cma.h>)\n#include <rdma/rdma_cma.h>\n#endif\n")
	out, err := cmd.Output()
	if err != nil {
		return nil, ErrNoHeaders
	}
	return out, nil
}

// hasHeader reports whether cc finds a system header.
func hasHeader(cc, name string) bool {
	cmd := exec.Command(cc, "-E", "-x", "c", "-")
	cmd.Stdin = strings.NewReader("#include <" + name + ">\n")
	return cmd.Run() == nil
}

// digest names a build: the sources, the headers as preprocessed, and the
// compiler.
func digest(cc string, header []byte) (string, error) {
	h := sha256.New()
	names, err := fs.Glob(sources, "src/*")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := sources.ReadFile(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	h.Write(header)
	h.Write([]byte(cc))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// writeSources writes the embedded sources into dir and returns the C
// files.
func writeSources(dir string) ([]string, error) {
	names, err := fs.Glob(sources, "src/*")
	if err != nil {
		return nil, err
	}
	var cs []string
	for _, n := range names {
		b, err := sources.ReadFile(n)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, filepath.Base(n))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, fmt.Errorf("libgoroce: %w", err)
		}
		if strings.HasSuffix(n, ".c") {
			cs = append(cs, p)
		}
	}
	sort.Strings(cs)
	return cs, nil
}
