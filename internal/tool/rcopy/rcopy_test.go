package rcopy

import (
	"bytes"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
)

// TestCopy copies files between roce rcopy's two roles over UDP on
// loopback: a 3 MiB file arrives whole with its permissions, and a path
// leading out of the server's directory is refused with EACCES, which
// the client exits with.
func TestCopy(t *testing.T) {
	dir, srcDir := t.TempDir(), t.TempDir()
	src := filepath.Join(srcDir, "data.bin")
	want := make([]byte, 3<<20+123)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(src, want, 0o640); err != nil {
		t.Fatal(err)
	}
	common := []string{"--roce-port", strconv.Itoa(clitest.LoopbackUDPPort(t)), "-p", "7499", "--timeout", "20s"}
	sout, serr := clitest.NewBuffer("waiting for connection..."), clitest.NewBuffer("")
	done := make(chan int, 1)
	go func() {
		done <- clitest.Run(Cmd, nil, sout, serr, append([]string{"--bind", "127.0.0.1", "--dir", dir, "--count", "2"}, common...)...)
	}()
	select {
	case <-sout.Ready():
	case <-time.After(20 * time.Second):
		t.Fatalf("server not ready: %s%s", sout, serr)
	}
	client := func(dst string) (int, string) {
		out, errs := clitest.NewBuffer(""), clitest.NewBuffer("")
		code := clitest.Run(Cmd, nil, out, errs, append([]string{src, "127.0.0.1:" + dst, "--bind", "127.0.0.2"}, common...)...)
		return code, out.String() + errs.String()
	}
	code, out := client("copy.bin")
	if code != 0 || !regexpMatch(`^opening\.\.\.transferring\.\.\.closing\.\.\.done\n3145851 bytes in [0-9.]+ seconds = [0-9.]+ Gb/sec\n$`, out) {
		t.Fatalf("client exit %d:\n%s", code, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "copy.bin"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("copy: %v, %d bytes, equal %v", err, len(got), bytes.Equal(got, want))
	}
	if fi, err := os.Stat(filepath.Join(dir, "copy.bin")); err != nil || fi.Mode().Perm()&^0o022 != 0o640&^0o022 {
		t.Errorf("mode %v, %v; want 0640 (less the umask)", fi.Mode(), err)
	}
	code, out = client("../escape.bin")
	if code != statusEACCES || !strings.HasPrefix(out, "opening...roce rcopy: the server answered with status 13") {
		t.Errorf("client of ../escape.bin: exit %d:\n%s", code, out)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("server exit %d: %s", code, serr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not end after its two connections")
	}
	wantOut := "waiting for connection...client: 127.0.0.2\nopening: copy.bin, transferring...3145851 bytes...closing...done\n" +
		"waiting for connection...client: 127.0.0.2\nopening: ../escape.bin, unable to open destination file\n"
	if sout.String() != wantOut {
		t.Errorf("server output\n%q, want\n%q", sout.String(), wantOut)
	}
	if !strings.Contains(serr.String(), `"../escape.bin" leads out of the server's directory`) {
		t.Errorf("server stderr %q", serr.String())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.bin")); err == nil {
		t.Error("the server wrote outside its directory")
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestServerWire feeds the server's session rcopy's messages byte for
// byte, as rcopy's client lays them out, and checks its answers.
func TestServerWire(t *testing.T) {
	root, err := os.OpenRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, c := range []struct {
		name     string
		in, want string // hex
		out      string
	}{
		{"open write close",
			// OPEN, length 24, mode 0100644, id 7, "f.txt" padded to 8;
			// WRITE, length 24, size 3, "abc"; CLOSE, length 16.
			"0001" + "1800" + "a4810000" + "0700000000000000" + "662e747874000000" +
				"0003" + "1800" + "00000000" + "0000000000000000" + "0300000000000000" + "616263" +
				"0002" + "1000" + "00000000" + "0000000000000000",
			"0081" + "1000" + "00000000" + "0700000000000000" +
				"0083" + "1000" + "00000000" + "0000000000000000" +
				"0082" + "1000" + "00000000" + "0000000000000000",
			"opening: f.txt, transferring...3 bytes...closing...done\n"},
		{"write before open", "0003" + "1800" + "00000000" + "0900000000000000" + "0300000000000000",
			"0083" + "1000" + "16000000" + "0900000000000000", "transferring...file not opened\n"},
		{"unknown command", "0009" + "1000" + "00000000" + "0500000000000000",
			"0089" + "1000" + "16000000" + "0500000000000000", ""},
		{"bad version", "0101" + "1000" + "00000000" + "0000000000000000", "", "invalid version 1 or length 16\n"},
		{"absolute path", "0001" + "1800" + "a4810000" + "0000000000000000" + "2f746d702f780000",
			"0081" + "1000" + "0d000000" + "0000000000000000", "opening: /tmp/x, unable to open destination file\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in, _ := hex.DecodeString(c.in)
			var got bytes.Buffer
			var out, errs strings.Builder
			s := &session{root: root, out: &out, errs: &errs}
			s.process(struct {
				io.Reader
				io.Writer
			}{bytes.NewReader(in), &got})
			s.closeFile()
			if hex.EncodeToString(got.Bytes()) != c.want || out.String() != c.out {
				t.Errorf("answers %x\nwant    %s\noutput %q, want %q", got.Bytes(), c.want, out.String(), c.out)
			}
		})
	}
	if b, err := root.ReadFile("f.txt"); err != nil || string(b) != "abc" {
		t.Errorf("f.txt: %q, %v", b, err)
	}
}

// TestClientWire runs the client's side against a scripted server and
// checks every byte it sends: OPEN with the mode and the padded path,
// WRITE with the size, the data, CLOSE.
func TestClientWire(t *testing.T) {
	src := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(src, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(src, 0o600)
	cl, sv := net.Pipe()
	var got bytes.Buffer
	go func() {
		defer sv.Close()
		for _, n := range []int{16 + 16, 24 + 10, 16} { // a message (and the data), then the answer
			b := make([]byte, n)
			if _, err := io.ReadFull(sv, b); err != nil {
				return
			}
			got.Write(b)
			sv.Write(respMsg(getHdr(b), 0))
		}
	}()
	var out strings.Builder
	o := &options{}
	if _, _, err := o.send(&out, cl, src, "dir/dst.bin"); err != nil {
		t.Fatal(err)
	}
	want := "0001" + "2000" + "80810000" + "0000000000000000" + "6469722f6473742e62696e0000000000" +
		"0003" + "1800" + "00000000" + "0000000000000000" + "0a00000000000000" + "30313233343536373839" +
		"0002" + "1000" + "00000000" + "0000000000000000"
	if hex.EncodeToString(got.Bytes()) != want {
		t.Errorf("the client sent\n%x\nwant\n%s", got.Bytes(), want)
	}
	if out.String() != "opening...transferring...closing...done\n" {
		t.Errorf("output %q", out.String())
	}
}

func TestSplitDest(t *testing.T) {
	for _, c := range []struct{ arg, server, dest string }{
		{"host", "host", "src"}, {"host:", "host", "src"}, {"10.0.0.1:/tmp/x", "10.0.0.1", "/tmp/x"},
		{"[2001:db8::1]:y", "2001:db8::1", "y"}, {"[2001:db8::1]", "2001:db8::1", "src"}, {"h:a:b", "h", "a:b"},
	} {
		if s, d := splitDest(c.arg, "src"); s != c.server || d != c.dest {
			t.Errorf("splitDest(%q) = %q, %q; want %q, %q", c.arg, s, d, c.server, c.dest)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"only-one"}, cli.ExitUsage, "not 1 arguments"},
		{[]string{"a", "b", "c"}, cli.ExitUsage, "not 3 arguments"},
		{[]string{"-p", "0"}, cli.ExitUsage, "-p 0"},
		{[]string{"--count", "-1"}, cli.ExitUsage, "--count -1"},
		{[]string{"--transport", "tcp"}, cli.ExitUsage, `--transport "tcp"`},
		{[]string{"--mtu", "1000"}, cli.ExitUsage, "--mtu 1000"},
		{[]string{"--timeout", "0s"}, cli.ExitUsage, "--timeout"},
		{nil, cli.ExitUsage, "the server needs the address to serve on: --bind ADDR"},
		{[]string{"--bind", "127.0.0.1", "--dir", "/nonexistent/dir"}, cli.ExitUsage, "--dir"},
		{[]string{"/nonexistent/file", "127.0.0.1", "--timeout", "5s", "--roce-port", strconv.Itoa(clitest.LoopbackUDPPort(t))},
			exitFailure, "rconnect failed"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errb := clitest.NewBuffer(""), clitest.NewBuffer("")
			code := clitest.Run(Cmd, nil, out, errb, tc.args...)
			if code != tc.code || !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.stderr)
			}
		})
	}
}
