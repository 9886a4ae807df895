// Command rsockhttp is the lab's HTTP server on rsockets: Go's net/http
// server on goroce's package rsocket, for the interop case in which an
// unmodified socket program in a guest (curl under LD_PRELOAD of
// librdmacm's librspreload.so) talks HTTP to goroce. run.sh builds it on
// the host next to the roce binary.
//
//	rsockhttp --bind 198.18.0.1 [-p 8080] [--requests N] [--keepalive D] [--transport udp|afpacket] [--dev IFACE] [--mtu BYTES]
//
// GET /seq?n=N answers with what `seq 1 N` prints (N up to 10 million),
// so that the client can compare a checksum with seq's own; POST /sha256
// answers with the SHA-256 of the body, in sha256sum's form. After
// --requests requests (0: no end) it shuts down gracefully and exits 0.
// Every wait is bounded by --timeout.
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/rsocket"
)

func main() {
	var dev cli.DeviceFlags
	fs := flag.NewFlagSet("rsockhttp", flag.ExitOnError)
	fs.StringVar(&dev.Bind, "bind", "", "local IP `address` of the RoCE device, where the server listens")
	fs.StringVar(&dev.Transport, "transport", "udp", "udp or afpacket")
	fs.StringVar(&dev.Dev, "dev", "", "network `interface` of the afpacket transport")
	port := fs.Int("p", 8080, "rdma_cm TCP `port`")
	requests := fs.Int64("requests", 0, "exit after this many requests (0: no end)")
	mtu := fs.Int("mtu", 0, "largest path MTU in `bytes` (default: the device's)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole run")
	keepalive := fs.Duration("keepalive", 0, "probe idle connections this often (0: rsocket's default, 15 s)")
	fs.Parse(os.Args[1:])
	dev.Port = 4791
	if err := run(&dev, *port, *requests, *mtu, *timeout, *keepalive); err != nil {
		log.Fatalf("rsockhttp: %v", err)
	}
}

func run(df *cli.DeviceFlags, port int, requests int64, mtu int, timeout, keepalive time.Duration) error {
	cfg, err := df.Config("")
	if err != nil {
		return err
	}
	dev, err := df.Open(cfg, false, nil)
	if err != nil {
		return err
	}
	defer dev.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lc := &rsocket.ListenConfig{}
	lc.PathMTU, _ = bth.MTUFromBytes(mtu)
	lc.KeepAlive = keepalive
	ln, err := lc.Listen(ctx, dev, netip.AddrPortFrom(dev.Addr(), uint16(port)))
	if err != nil {
		return err
	}
	fmt.Printf("rsockhttp: serving on rsocket %v\n", ln.Addr())
	srv := &http.Server{ReadHeaderTimeout: timeout}
	var served atomic.Int64
	done := make(chan struct{})
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r)
		log.Printf("rsockhttp: %s %s from %s", r.Method, r.URL, r.RemoteAddr)
		if requests > 0 && served.Add(1) == requests {
			close(done)
		}
	})
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-done:
	case <-ctx.Done():
		srv.Close()
		return fmt.Errorf("%d of %d requests served in %v", served.Load(), requests, timeout)
	case err := <-errc:
		return err
	}
	// The last response is written; Shutdown waits until its connection is
	// idle (or the client closed it) and closes it.
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serve answers GET /seq?n=N and POST /sha256.
func serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/seq":
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > 10_000_000 {
			http.Error(w, "n: want 0 to 10000000", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		b := bufio.NewWriterSize(w, 64<<10)
		for i := 1; i <= n; i++ {
			b.WriteString(strconv.Itoa(i))
			b.WriteByte('\n')
		}
		b.Flush()
	case r.Method == http.MethodPost && r.URL.Path == "/sha256":
		h := sha256.New()
		if _, err := io.Copy(h, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%x  -\n", h.Sum(nil))
	default:
		http.NotFound(w, r)
	}
}
