package rsocket

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHTTP runs net/http's server and client over rsocket: keep-alive
// connections reused for many requests, bodies both ways checked by
// SHA-256, concurrent clients, and a graceful shutdown.
func TestHTTP(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			checkNoLeak(t)
			h := be.open(t, transportNoFaults)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ln, err := (&ListenConfig{Options: Options{Agent: h.ab}}).Listen(ctx, h.b, netip.AddrPortFrom(h.addrB, 80))
			if err != nil {
				t.Fatal(err)
			}
			var conns atomic.Int32
			srv := &http.Server{Handler: http.HandlerFunc(handle),
				ConnState: func(_ net.Conn, s http.ConnState) {
					if s == http.StateNew {
						conns.Add(1)
					}
				}}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()

			tr := &http.Transport{DialContext: (&Dialer{Device: h.a, Options: Options{Agent: h.aa}}).DialContext,
				MaxIdleConnsPerHost: 4}
			client := &http.Client{Transport: tr}
			base := "http://" + netip.AddrPortFrom(h.addrB, 80).String()
			var wg sync.WaitGroup
			const clients, requests = 4, 10
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range requests {
						if err := exchange(ctx, client, base, i*requests+j); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// http.Transport may dial a spare connection when requests
			// race, but reuses connections: far fewer than requests.
			if n := conns.Load(); n < 1 || n > clients*requests/4 {
				t.Errorf("%d connections for %d requests from %d clients: keep-alive not reused", n, clients*requests, clients)
			}
			tr.CloseIdleConnections()
			if err := srv.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-served; err != http.ErrServerClosed {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
}

// handle answers /sum with the SHA-256 of the request body, and /bytes?n=N
// with N bytes of a pattern.
func handle(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/sum":
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%x", h.Sum(nil))
	case "/bytes":
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Write(httpPattern(n))
	default:
		http.NotFound(w, r)
	}
}

func httpPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 131 >> 3)
	}
	return b
}

// exchange POSTs a body of a size that depends on i and checks its sum,
// then GETs a body and checks its bytes.
func exchange(ctx context.Context, c *http.Client, base string, i int) error {
	body := httpPattern(1 + i*37813%(256<<10))
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/sum", bytes.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if sum := sha256.Sum256(body); err != nil || string(got) != hex.EncodeToString(sum[:]) {
		return fmt.Errorf("POST %d bytes: %q, %v", len(body), got, err)
	}
	n := i * 51787 % (512 << 10)
	req, _ = http.NewRequestWithContext(ctx, "GET", base+"/bytes?n="+strconv.Itoa(n), nil)
	if resp, err = c.Do(req); err != nil {
		return err
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, httpPattern(n)) {
		return fmt.Errorf("GET %d bytes: %d, %v", n, len(got), err)
	}
	return nil
}
