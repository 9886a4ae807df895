//go:build !linux

package rawudp

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
)

// errNotSupported is what roce rawudp does where it cannot measure.
var errNotSupported = fmt.Errorf("not supported on %s: the baseline measures Linux's UDP GSO, GRO, sendmmsg and recvmmsg (run it on Linux)", runtime.GOOS)

// socket stands for the Linux socket of socket_linux.go; openSocket
// returns errNotSupported, so the other methods are never called.
type socket struct{ ackLen int }

func openSocket(netip.AddrPort, time.Duration) (*socket, error) { return nil, errNotSupported }

func (s *socket) close() error                                  { return errNotSupported }
func (s *socket) connect(netip.AddrPort) error                  { return errNotSupported }
func (s *socket) enableGRO() error                              { return errNotSupported }
func (s *socket) setNonblock() error                            { return errNotSupported }
func (s *socket) setRecvTimeout(time.Duration) error            { return errNotSupported }
func (s *socket) receive(int, int, bool, *atomic.Bool) result   { return result{} }
func (s *socket) setAck(int) error                              { return errNotSupported }
func (s *socket) setCalls(netip.Addr, netip.AddrPort) error     { return errNotSupported }
func (s *socket) localAddr() (netip.AddrPort, error)            { return netip.AddrPort{}, errNotSupported }
func (s *socket) send(context.Context, *config) (uint64, error) { return 0, errNotSupported }
func (s *socket) echo(*atomic.Bool) uint64                      { return 0 }
func (s *socket) write([]byte) error                            { return errNotSupported }
func (s *socket) await([]byte, uint32, bool) (bool, error)      { return false, errNotSupported }
