package libgoroce_test

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/devicetest"
)

// TestPyverbs runs testdata/rc.py, a program on rdma-core's Python
// bindings (Debian's python3-pyverbs), as two processes on the device:
// each opens it, registers memory and connects an RC QP, and the client
// WRITEs and SENDs to the server, which answers with a SEND.
func TestPyverbs(t *testing.T) {
	py := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import pyverbs.device").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with pyverbs (apt-get install python3-pyverbs)")
	}
	h := devicetest.NewHost(t)
	h.Start("goroce0", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := devicetest.FreeTCPPort(t)
	p := strconv.Itoa(port)
	s, c := h.Pair(ctx, port, []string{py, "testdata/rc.py", "goroce0", p},
		[]string{py, "testdata/rc.py", "goroce0", p, "127.0.0.1"})
	if s.Err != nil || c.Err != nil || !strings.Contains(s.Out, "pyverbs server: WRITE and SEND received") ||
		!strings.Contains(c.Out, "pyverbs client: WRITE and SEND done, answer received") {
		t.Fatalf("want exit 0 and the end lines from both:\nserver %s\nclient %s", s, c)
	}
}
