package diagram

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of a Chromium to run headless: $CHROMIUM, or
// the first of chromium, chromium-browser and google-chrome on $PATH. The
// test skips when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium to load the page in: apt-get install -y chromium (Debian), or set CHROMIUM to a browser binary")
	return ""
}

// probe is added to the page under test: after the page's own script, it
// checks that every arrow has a line (or loop) the browser laid out, each
// below the one before (time runs down), and writes what it found on the
// body for --dump-dom to show.
const probe = `<script>
(function () {
  var shown = 0, ordered = true, lastY = -1;
  document.querySelectorAll("#ladder g.pkt").forEach(function (g) {
    var line = g.querySelector("line, path");
    if (!line) return;
    var r = line.getBoundingClientRect();
    if (r.width > 0) shown++;
    if (r.top <= lastY) ordered = false;
    lastY = r.top;
  });
  document.body.setAttribute("data-shown", String(shown));
  document.body.setAttribute("data-ordered", String(ordered));
})();
</script>
`

// loadPage loads page in headless Chromium with no network and returns the
// DOM after its scripts ran and the lines the page wrote to the console
// (log, warning, error and uncaught exception alike).
func loadPage(t *testing.T, browser string, page []byte) (dom string, console []string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "page.html")
	if err := os.WriteFile(file, page, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--host-resolver-rules=MAP * ~NOTFOUND", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--enable-logging=stderr", "--v=0", "--dump-dom", "file://"+file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
	}
	t.Logf("Chromium loaded %d bytes in %v", len(page), time.Since(start).Round(time.Millisecond))
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	return stdout.String(), console
}

// bodyAttr returns an attribute of the dumped DOM's body.
func bodyAttr(dom, name string) string {
	m := regexp.MustCompile(`<body[^>]* ` + name + `="([^"]*)"`).FindStringSubmatch(dom)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestBrowser loads pages in a real headless Chromium and checks that they
// load without a word on the console, that their script ran, and that the
// browser lays out one arrow per RoCE packet, each below the one before.
func TestBrowser(t *testing.T) {
	browser := chromium(t)
	t.Run("console is watched", func(t *testing.T) {
		// The checks below mean something only if a broken page fails them.
		_, console := loadPage(t, browser, []byte(`<!DOCTYPE html><body><script>null.x()</script></body>`))
		if len(console) == 0 {
			t.Fatal("an uncaught exception left no console line: the console check below would miss errors")
		}
	})
	pages := map[string]func(*testing.T) *Diagram{
		"rxe_rping_rdmacm.pcap":  func(t *testing.T) *Diagram { return captureDiagram(t, "rxe_rping_rdmacm.pcap") },
		"rxe_write_bw_loss.pcap": func(t *testing.T) *Diagram { return captureDiagram(t, "rxe_write_bw_loss.pcap") },
		"100000 packets": func(t *testing.T) *Diagram {
			d, err := FromCapture(bytes.NewReader(bigCapture(t, 100000)))
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	}
	for name, build := range pages {
		t.Run(name, func(t *testing.T) {
			d := build(t)
			var page bytes.Buffer
			if err := d.WriteHTML(&page, nil); err != nil {
				t.Fatal(err)
			}
			want := min(len(d.Records), DefaultHTMLPackets)
			b := bytes.Replace(page.Bytes(), []byte("</body>"), []byte(probe+"</body>"), 1)
			dom, console := loadPage(t, browser, b)
			if len(console) > 0 {
				t.Errorf("console:\n%s", strings.Join(console, "\n"))
			}
			n := strconv.Itoa(want)
			if got := bodyAttr(dom, "data-packets"); got != n {
				t.Errorf("the page's script counted %q arrows, want %s", got, n)
			}
			if got := strings.Count(dom, `<g class="pkt `); got != want {
				t.Errorf("the DOM has %d arrows, want %d", got, want)
			}
			if shown, ordered := bodyAttr(dom, "data-shown"), bodyAttr(dom, "data-ordered"); shown != n || ordered != "true" {
				t.Errorf("%s arrows laid out (ordered: %s), want %s, each below the one before", shown, ordered, n)
			}
		})
	}
}
