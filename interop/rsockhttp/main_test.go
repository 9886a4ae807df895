package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/clitest"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/rsocket"
)

// TestServe runs the server over UDP on loopback for two requests, a GET
// of /seq and a POST to /sha256 from net/http's client on rsockets, and
// checks both answers and that it then exits.
func TestServe(t *testing.T) {
	port := uint(clitest.LoopbackUDPPort(t))
	errc := make(chan error, 1)
	go func() {
		errc <- run(&cli.DeviceFlags{Bind: "127.0.0.1", Transport: "udp", Port: port}, 8080, 2, 0, 30*time.Second, 0)
	}()
	dev, err := roce.Open(&roce.Config{Link: &roce.UDP{Addr: netip.MustParseAddr("127.0.0.2"), Port: uint16(port), PeerPort: uint16(port)}})
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	tr := &http.Transport{DialContext: (&rsocket.Dialer{Device: dev}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	var want strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	var resp *http.Response
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// The server listens once its goroutine got there.
		if resp, err = client.Get("http://127.0.0.1:8080/seq?n=20000"); err == nil || time.Now().After(end) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != want.String() {
		t.Fatalf("GET /seq: %v, %d bytes, want %d", err, len(body), want.Len())
	}
	resp, err = client.Post("http://127.0.0.1:8080/sha256", "application/octet-stream", strings.NewReader(want.String()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if wantSum := fmt.Sprintf("%x  -\n", sha256.Sum256([]byte(want.String()))); string(body) != wantSum {
		t.Fatalf("POST /sha256: %q, want %q", body, wantSum)
	}
	tr.CloseIdleConnections()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not exit after its two requests")
	}
}
