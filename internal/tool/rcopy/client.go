package rcopy

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/rsocket"
)

// copy is the client: it sends the file source to the server named in
// dst (SERVER[:DESTINATION]) as rcopy's client_run does, printing its
// progress and, when all went well, the rate.
func (o *options) copy(ctx context.Context, env *cli.Env, source, dst string) error {
	server, dest := splitDest(dst, source)
	addr, err := cli.ResolveAddr(server)
	if err != nil {
		return err
	}
	def := ""
	if o.bind == "" {
		if a, err := cli.RouteSource(addr); err == nil {
			def = a.String()
		}
	}
	dev, err := o.openDevice(env, def, true)
	if err != nil {
		return err
	}
	defer dev.Close()
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	d := &rsocket.Dialer{Options: o.rsocketOptions()}
	c, err := d.Dial(cctx, dev, netip.AddrPortFrom(addr, uint16(o.port)))
	cancel()
	if err != nil {
		return fmt.Errorf("rconnect failed: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	start, end, err := o.send(env.Stdout, &timedConn{Conn: c, timeout: o.timeout}, source, dest)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, rate(start.size, end.Sub(start.at)))
	return nil
}

// mark is when the transfer started, and how big it is.
type mark struct {
	at   time.Time
	size int64
}

// send runs the client's side of the protocol on c: OPEN, WRITE and the
// data, CLOSE. It returns the transfer's start and end (the data and
// WRITE's answer, as rcopy times it).
func (o *options) send(out io.Writer, c net.Conn, source, dest string) (mark, time.Time, error) {
	fmt.Fprint(out, "opening...")
	f, err := os.Open(source)
	if err != nil {
		return mark{}, time.Time{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return mark{}, time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return mark{}, time.Time{}, fmt.Errorf("%s is not a regular file", source)
	}
	msg, err := openMsg(dest, modeOf(fi))
	if err != nil {
		return mark{}, time.Time{}, err
	}
	if err := exchange(c, msg, cmdOpen); err != nil {
		return mark{}, time.Time{}, err
	}
	start, end, err := transfer(out, c, f, fi.Size())
	// rcopy closes the file on the server whether the transfer went well
	// or not.
	fmt.Fprint(out, "closing...")
	if cerr := exchange(c, closeMsg(), cmdClose); err == nil {
		err = cerr
	}
	if err == nil {
		fmt.Fprintln(out, "done")
	}
	return start, end, err
}

// transfer sends WRITE, then size bytes of f, and waits for the answer.
func transfer(out io.Writer, c net.Conn, f io.Reader, size int64) (mark, time.Time, error) {
	fmt.Fprint(out, "transferring")
	if _, err := c.Write(writeMsg(uint64(size))); err != nil {
		return mark{}, time.Time{}, err
	}
	fmt.Fprint(out, "...")
	start := mark{at: time.Now(), size: size}
	n, err := io.CopyBuffer(c, io.LimitReader(f, size), make([]byte, 1<<20))
	if err == nil && n < size {
		err = fmt.Errorf("the source shrank to %d bytes while being sent", n)
	}
	if err == nil {
		err = readResp(c, cmdWrite)
	}
	return start, time.Now(), err
}

// exchange sends msg and waits for the answer to cmd.
func exchange(c net.Conn, msg []byte, cmd uint8) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	return readResp(c, cmd)
}

// modeOf is a file's st_mode as rcopy sends it: a regular file's type
// bits and its permissions.
func modeOf(fi fs.FileInfo) uint32 {
	const sIFREG = 0o100000
	return sIFREG | uint32(fi.Mode().Perm())
}

// rate is rcopy's last line. rcopy keeps the microseconds in a float: so
// does this, so that the rounding is the same.
func rate(bytes int64, d time.Duration) string {
	usec := float32(d.Microseconds())
	return fmt.Sprintf("%d bytes in %.2f seconds = %.2f Gb/sec", bytes, float64(usec)/1e6,
		float64(bytes*8)/(1000*float64(usec)))
}
