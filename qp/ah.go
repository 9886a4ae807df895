package qp

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// AH is an address handle: the destination of UD sends. It is immutable
// and safe for concurrent use.
type AH struct {
	attr verbs.AHAttr
}

// CreateAH returns an address handle for attr in the PD.
func (p *PD) CreateAH(attr verbs.AHAttr) (verbs.AH, error) {
	if !p.ok() {
		return nil, errNilPD
	}
	if err := checkDest(attr.DGID, p.dev.srcFor(verbs.AddrFromGID(attr.DGID)), "AHAttr.DGID"); err != nil {
		return nil, err
	}
	return &AH{attr: attr}, nil
}

// checkDest checks a destination GID against the device's address.
func checkDest(gid [16]byte, local netip.Addr, field string) error {
	dst := netip.AddrFrom16(gid).Unmap()
	if dst.IsUnspecified() {
		return fmt.Errorf("%w: no destination GID (%s is zero): set it to the peer's GID, its IP address "+
			"as verbs.GIDFromAddr makes it", verbs.ErrInvalidAttr, field)
	}
	if dst.Is4() != local.Is4() {
		return fmt.Errorf("%w: destination %v and device address %v are not the same IP version",
			verbs.ErrInvalidAttr, dst, local)
	}
	return nil
}

// Attr returns the handle's address vector (the zero one, for a nil AH).
func (a *AH) Attr() verbs.AHAttr {
	if a == nil {
		return verbs.AHAttr{}
	}
	return a.attr
}

// Destroy frees the handle; work requests already posted keep their copy
// of the address.
func (a *AH) Destroy() error {
	if a == nil {
		return nilError("nil *AH", "PD.CreateAH")
	}
	return nil
}
