package libgoroce_test

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestVerbs runs testdata/verbs.c, a C program built against the
// system's <infiniband/verbs.h>, on the device: every verb's success and
// error returns, as libibverbs' man pages and kernel rxe give them, and
// every public function of libibverbs the program references resolving
// to libgoroce, none to the real library.
func TestVerbs(t *testing.T) {
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	exe := buildVerbs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := h.Run(ctx, exe, "goroce0")
	if r.Err != nil || !strings.Contains(r.Out, ", 0 failed") {
		t.Fatalf("verbs: %s", r)
	}
	t.Log(strings.TrimSpace(r.Out))
}

// buildVerbs builds testdata/verbs.c with a reference to every public
// function of the system's libibverbs (syms.c).
func buildVerbs(t *testing.T) string {
	t.Helper()
	devicetest.Lib(t)
	names := publicFunctions(t)
	var b strings.Builder
	b.WriteString("#include <infiniband/verbs.h>\nvoid *const gr_syms[] = {\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t(void *)&%s,\n", n)
	}
	b.WriteString("};\nconst char *const gr_names[] = {\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%q,\n", n)
	}
	fmt.Fprintf(&b, "};\nconst int gr_nsyms = %d;\n", len(names))
	syms := filepath.Join(t.TempDir(), "syms.c")
	if err := os.WriteFile(syms, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return devicetest.CC(t, "verbs", []string{"testdata/verbs.c", syms}, "-ldl")
}

// publicFunctions lists the functions the system's libibverbs exports in
// its public versions (IBVERBS_1.x) that <infiniband/verbs.h> declares.
func publicFunctions(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("cc", "-print-file-name=libibverbs.so.1").Output()
	path := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(path) {
		t.Skipf("no libibverbs.so.1 to compare with (%v)", err)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dyn, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cc", "-E", "-x", "c", "-")
	cmd.Stdin = strings.NewReader("#include <infiniband/verbs.h>\n")
	hdr, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var names, skipped []string
	for _, s := range dyn {
		if s.Section == elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC || !strings.HasPrefix(s.Version, "IBVERBS_1.") ||
			seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		// A declaration: the name, then its parameters.
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(s.Name) + `\s*\(`).Match(hdr) {
			skipped = append(skipped, s.Name)
			continue
		}
		names = append(names, s.Name)
	}
	if len(names) < 50 {
		t.Fatalf("only %d public functions of %s in <infiniband/verbs.h>", len(names), path)
	}
	// ibv_copy_*: <infiniband/marshall.h>, which Debian does not ship, for
	// librdmacm; the sysfs and fork helpers: the private API of rdma-core's
	// tools, which libgoroce has too.
	t.Logf("%d functions checked; not declared in verbs.h, not checked: %v", len(names), skipped)
	return names
}

// TestVerbsStrings compares what the pure helpers (ibv_wc_status_str,
// ibv_event_type_str, the rate conversions, ...) return under libgoroce
// with what the real libibverbs returns.
func TestVerbsStrings(t *testing.T) {
	h := devicetest.NewHost(t)
	exe := buildVerbs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	real, err := exec.CommandContext(ctx, exe, "--strings").CombinedOutput()
	if err != nil {
		t.Fatalf("verbs --strings on libibverbs: %v\n%s", err, real)
	}
	r := h.Run(ctx, exe, "--strings")
	if r.Err != nil {
		t.Fatalf("verbs --strings on libgoroce: %s", r)
	}
	want, got := strings.Split(string(real), "\n"), strings.Split(r.Out, "\n")
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("libibverbs says %q, libgoroce %q", w, g)
		}
	}
}
