//go:build !linux

package uverbs

import (
	"fmt"
	"net/netip"
	"runtime"

	"github.com/goroce/goroce/roce"
)

// Server serves one device on its control socket; on this system it never
// does.
type Server struct{}

// Serve reports ErrUnsupported: serving a device takes Linux (memfd,
// eventfd, SCM_RIGHTS).
func Serve(dev *roce.Device, cfg *Config) (*Server, error) {
	return nil, fmt.Errorf("%w (%s): run roce device on Linux", ErrUnsupported, runtime.GOOS)
}

// Path returns "".
func (s *Server) Path() string { return "" }

// Sessions returns 0.
func (s *Server) Sessions() int { return 0 }

// Listening returns nil.
func (s *Server) Listening() []netip.AddrPort { return nil }

// Close does nothing.
func (s *Server) Close() error { return nil }
