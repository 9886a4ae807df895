package perf

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/verbs"
)

// Multicast (--mcg, -M): ib_send_bw's send_set_up_connection and
// set_mcast_group on RoCE, where there is no subnet administrator to join:
// the QP is UD, the server attaches it to the group's GID (MGID) and
// announces the group in its handshake entry (QPN 0xFFFFFF, the MGID as
// GID), and the client sends to that entry, which it prints as the MGID.

// perftest's multicast constants (multicast_resources.h,
// perftest_resources.h): the Q_Key of its UD QPs, the room for the GRH
// ahead of a UD receive, and the group of a run without -M (MCG_GID).
const (
	mcastQKey  = 0x11111111
	udAddition = 40
)

var defMGID = [16]byte{255, 1, 0, 0, 0, 2, 201, 133}

// parseMGID reads -M as perftest's set_multicast_gid does: 16 numbers
// separated by ':', each decimal, or hex with 0x, or octal with 0.
func parseMGID(s string) ([16]byte, error) {
	var g [16]byte
	parts := strings.Split(s, ":")
	if len(parts) != 16 {
		return g, fmt.Errorf("-M %q: want the MGID's 16 bytes separated by ':' (as perftest reads it: "+
			"0:0:0:0:0:0:0:0:0:0:255:255:239:255:0:1 is ::ffff:239.255.0.1)", s)
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 0, 8)
		if err != nil {
			return g, fmt.Errorf("-M %q: byte %d, %q, is not a number from 0 to 255", s, i, p)
		}
		g[i] = byte(v)
	}
	return g, nil
}

// checkMcast applies --mcg and -M: perftest's dependencies (a send
// bandwidth test, one QP, no rdma_cm) and the group's GID.
func (o *options) checkMcast(fs *cli.FlagSet) error {
	if !o.mcg {
		if fs.IsSet("M") {
			return cli.Usagef("-M applies to multicast (--mcg) only")
		}
		return nil
	}
	switch {
	case o.verb != verbSend:
		return cli.Usagef(" MultiCast feature only available on SEND verb")
	case o.lat:
		return cli.Usagef("--mcg runs the bandwidth test only (ib_send_bw --mcg)")
	case o.qps != 1:
		return cli.Usagef("Only 1 QP supported in multicast")
	case o.rdmaCM:
		return cli.Usagef(" Perftest still doesn't support Multicast with rdma_cm")
	}
	o.mgid = defMGID
	if o.mgidStr != "" {
		g, err := parseMGID(o.mgidStr)
		if err != nil {
			return cli.Usagef("%w", err)
		}
		o.mgid = g
	}
	if !verbs.IsMulticastGID(o.mgid) {
		return cli.Usagef("-M: %v is not a multicast GID (ff00::/8, or ::ffff: and 224.0.0.0/4)", netip.AddrFrom16(o.mgid))
	}
	return nil
}

// mcastSetup attaches the server's QP to the group and makes its
// handshake entry the group's (send_set_up_connection).
func (r *session) mcastSetup() error {
	if r.role != oob.Server {
		return nil
	}
	q := r.qps[0]
	if err := q.AttachMcast(r.o.mgid); err != nil {
		return fmt.Errorf("couldn't attach QP to multicast group %v: %w", netip.AddrFrom16(r.o.mgid), err)
	}
	r.attached = true
	r.local[0].QPN, r.local[0].GID = verbs.MulticastQPN, r.o.mgid
	return nil
}

// mcastConnect moves the UD QP to RTR and RTS and, on the client, makes
// the address handle of the group the server announced.
func (r *session) mcastConnect() error {
	q := r.qps[0]
	p := r.params(nil)
	p.PSN = r.local[0].PSN
	if err := roce.ModifyToRTR(q, nil, p); err != nil {
		return fmt.Errorf("failed to modify QP %d to RTR: %w", q.QPN(), err)
	}
	if err := roce.ModifyToRTS(q, p); err != nil {
		return fmt.Errorf("failed to modify QP %d to RTS: %w", q.QPN(), err)
	}
	if r.role != oob.Client {
		return nil
	}
	ah, err := r.pd.CreateAH(verbs.AHAttr{DGID: r.remote[0].GID, SGIDIndex: uint8(r.gidIdx), HopLimit: hopLimit, Port: 1})
	if err != nil {
		return fmt.Errorf("failed to create AH to the group %v: %w", netip.AddrFrom16(r.remote[0].GID), err)
	}
	r.ah = ah
	return nil
}

// mcastLeave detaches the server's QP (send_destroy_ctx), so that it can
// be destroyed.
func (r *session) mcastLeave() {
	if r.attached {
		if err := r.qps[0].DetachMcast(r.o.mgid); err != nil {
			fmt.Fprintf(r.errOut, "Couldn't detach QP from MultiCast group: %v\n", err)
		}
		r.attached = false
	}
}

// mgidLabel says whether perftest prints an entry's GID as the MGID: the
// server's own and the client's remote one, in a multicast run.
func (r *session) mgidLabel(side string) bool {
	return r.o.mcg && (side == "local" && r.role == oob.Server || side == "remote" && r.role == oob.Client)
}
