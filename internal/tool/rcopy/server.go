package rcopy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/rsocket"
)

// serve listens and serves one connection after another until ctx ends
// or --count connections are done.
func (o *options) serve(ctx context.Context, env *cli.Env) error {
	addr, err := o.serverAddr()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(o.dir)
	if err != nil {
		return cli.Usagef("--dir: %w", err)
	}
	defer root.Close()
	def := ""
	if !addr.Addr().IsUnspecified() {
		def = addr.Addr().String()
	}
	dev, err := o.openDevice(env, def, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	lc := &rsocket.ListenConfig{Options: o.rsocketOptions(), Backlog: 1}
	ln, err := lc.Listen(ctx, dev, addr)
	if err != nil {
		return fmt.Errorf("rlisten failed: %w", err)
	}
	defer ln.Close()
	for n := 0; o.count == 0 || n < o.count; n++ {
		fmt.Fprint(env.Stdout, "waiting for connection...")
		c, err := ln.AcceptContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(env.Stdout)
				return nil // interrupted: rcopy's server runs until then
			}
			return fmt.Errorf("raccept: %w", err)
		}
		fmt.Fprintf(env.Stdout, "client: %s\n", c.RemoteAddr().(*rsocket.Addr).AddrPort.Addr())
		s := &session{root: root, out: env.Stdout, errs: env.Stderr}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		s.process(&timedConn{Conn: c, timeout: o.timeout})
		stop()
		s.closeFile()
		c.Close()
	}
	return nil
}

// session is one client's connection on the server: the file it opened.
// It is used by one goroutine.
type session struct {
	root *os.Root
	out  io.Writer
	errs io.Writer
	file *os.File
	size int64
}

// process serves c's commands until one fails or the client goes, as
// rcopy's server_process.
func (s *session) process(c io.ReadWriter) {
	for {
		h, err := readHdr(c)
		if err != nil {
			if errors.Is(err, errBadHeader) {
				fmt.Fprintln(s.out, err.Error()[len(errBadHeader.Error())+2:])
			}
			return
		}
		var status uint32
		switch h.command {
		case cmdOpen:
			status = s.open(c, h)
		case cmdClose:
			fmt.Fprint(s.out, "closing...")
			c.Write(respMsg(h, statusOK))
			s.closeFile()
			fmt.Fprintln(s.out, "done")
		case cmdWrite:
			status = s.write(c, h)
		default:
			c.Write(respMsg(h, statusEINVAL))
			return
		}
		if status != statusOK {
			return
		}
	}
}

// open serves an OPEN: it reads the path and creates (or truncates) the
// file inside the server's directory with the client's mode bits.
func (s *session) open(c io.ReadWriter, h hdr) uint32 {
	fmt.Fprint(s.out, "opening: ")
	status := s.openFile(c, h)
	c.Write(respMsg(h, status))
	return status
}

func (s *session) openFile(c io.Reader, h hdr) uint32 {
	if s.file != nil {
		fmt.Fprintln(s.out, "cannot open another file")
		return statusEBUSY
	}
	b := make([]byte, int(h.length)-hdrLen)
	if _, err := io.ReadFull(c, b); err != nil {
		fmt.Fprintln(s.out, "error receiving path")
		return statusEIO
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	path := string(b)
	fmt.Fprintf(s.out, "%s, ", path)
	if !filepath.IsLocal(path) {
		fmt.Fprintln(s.out, "unable to open destination file")
		fmt.Fprintf(s.errs, "roce rcopy: %q leads out of the server's directory (--dir %s): refused\n", path, s.root.Name())
		return statusEACCES
	}
	f, err := s.root.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.data&0o777))
	if err != nil {
		fmt.Fprintln(s.out, "unable to open destination file")
		fmt.Fprintf(s.errs, "roce rcopy: %v\n", err)
		return errnoOf(err)
	}
	s.file = f
	return statusOK
}

// write serves a WRITE: the size, then that many bytes into the file.
func (s *session) write(c io.ReadWriter, h hdr) uint32 {
	fmt.Fprint(s.out, "transferring")
	status := s.writeFile(c, h)
	c.Write(respMsg(h, status))
	return status
}

func (s *session) writeFile(c io.Reader, h hdr) uint32 {
	if s.file == nil {
		fmt.Fprintln(s.out, "...file not opened")
		return statusEINVAL
	}
	if h.length != writeLen {
		fmt.Fprintf(s.out, "...invalid message length %d\n", h.length)
		return statusEINVAL
	}
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return statusEIO
	}
	size := int64(binary.LittleEndian.Uint64(b[:]))
	if size < 0 {
		fmt.Fprintln(s.out, "...invalid size")
		return statusEINVAL
	}
	if err := s.file.Truncate(size); err != nil {
		return errnoOf(err)
	}
	s.size = size
	fmt.Fprintf(s.out, "...%d bytes...", size)
	n, err := io.CopyBuffer(s.file, io.LimitReader(c, size), make([]byte, 1<<20))
	if err == nil && n < size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		fmt.Fprintln(s.out, "...error receiving data")
		return errnoOf(err)
	}
	return statusOK
}

func (s *session) closeFile() {
	if s.file != nil {
		s.file.Close()
		s.file = nil
	}
}

// errnoOf is the status an error answers with: its errno value on Linux,
// ENOENT or EACCES for a missing file or a path refused, EIO otherwise.
func errnoOf(err error) uint32 {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno) && runtime.GOOS == "linux":
		return uint32(errno)
	case errors.Is(err, fs.ErrNotExist):
		return statusENOENT
	case errors.Is(err, fs.ErrPermission):
		return statusEACCES
	}
	return statusEIO
}

// timedConn is a connection whose every Read must return within its
// timeout: a client that stops sending does not hold the server for
// ever.
type timedConn struct {
	net.Conn
	timeout time.Duration
}

func (c *timedConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(p)
}
