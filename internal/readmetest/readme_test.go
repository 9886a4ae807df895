//go:build linux

package readmetest

import (
	"bytes"
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netnstest"
)

// program is a complete Go program of the README and the output it says
// the program prints.
type program struct {
	line int // where its block starts, for messages
	src  string
	want string
}

// blockRE matches a fenced block and its info string.
var blockRE = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```\n")

// programs returns each ```go block of readme, with the ```text block
// that follows it (after at most a paragraph) as its output; a ```go
// block that is not a complete program (package main) is an error.
func programs(t *testing.T, readme string) []program {
	var out []program
	blocks := blockRE.FindAllStringSubmatchIndex(readme, -1)
	for i, b := range blocks {
		lang, body := readme[b[2]:b[3]], readme[b[4]:b[5]]
		if lang != "go" {
			continue
		}
		if !strings.HasPrefix(body, "package main\n") {
			// Every Go example of the front door runs as printed: no
			// fragments that cannot be built.
			t.Errorf("README.md:%d: a Go block that is not a complete program (package main)",
				strings.Count(readme[:b[0]], "\n")+1)
			continue
		}
		p := program{line: strings.Count(readme[:b[0]], "\n") + 1, src: body}
		if i+1 < len(blocks) && readme[blocks[i+1][2]:blocks[i+1][3]] == "text" &&
			!strings.Contains(readme[b[1]:blocks[i+1][0]], "\n\n\n") {
			p.want = readme[blocks[i+1][4]:blocks[i+1][5]]
		}
		if p.want == "" {
			t.Errorf("README.md:%d: a program without a ```text block of its output after it", p.line)
		}
		out = append(out, p)
	}
	return out
}

// TestPrograms builds each complete program of README.md and runs it,
// in a network namespace of its own where the test runs as root (the
// programs use the default UDP port, which other tests may hold), and
// checks that it prints what the README says.
func TestPrograms(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ps := programs(t, string(readme))
	if len(ps) == 0 {
		t.Fatal("README.md has no complete program (a ```go block starting with package main)")
	}
	for _, p := range ps {
		if f, err := format.Source([]byte(p.src)); err != nil || string(f) != p.src {
			t.Errorf("README.md:%d: the program is not gofmt'd (%v)", p.line, err)
		}
		dir := t.TempDir()
		src := filepath.Join(dir, "main.go")
		if err := os.WriteFile(src, []byte(p.src), 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "prog")
		build := exec.Command("go", "build", "-o", bin, src)
		build.Dir = "../.." // the module's root, whose packages the program imports
		if out, err := build.CombinedOutput(); err != nil {
			t.Errorf("README.md:%d: the program does not build: %v\n%s", p.line, err, out)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin)
		if os.Geteuid() == 0 {
			if _, err := exec.LookPath("ip"); err == nil {
				cmd = exec.CommandContext(ctx, "ip", "netns", "exec", netnstest.New(t), bin)
			}
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Errorf("README.md:%d: the program failed: %v\n%s", p.line, err, stderr.Bytes())
			continue
		}
		if string(out) != p.want {
			t.Errorf("README.md:%d: the program printed\n%s\nwant (the README's)\n%s", p.line, out, p.want)
		}
	}
}
