package afpacket

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
)

// filter returns a classic BPF program for Ethernet frames that accepts
// untagged, unfragmented UDP to addr and port, and drops the rest.
func filter(addr netip.Addr, port uint16) ([]bpf.RawInstruction, error) {
	return filterFor([]netip.Addr{addr}, port)
}

// maxFilterAddrs bounds the destinations one filter takes: the jumps of
// classic BPF reach 255 instructions, and an IPv6 destination's test
// takes 8.
const maxFilterAddrs = 24

// filterFor returns a classic BPF program for Ethernet frames that accepts
// untagged, unfragmented UDP to port and to any of addrs (the transport's
// address and the multicast groups it joined, all of one IP version), and
// drops the rest.
func filterFor(addrs []netip.Addr, port uint16) ([]bpf.RawInstruction, error) {
	if len(addrs) == 0 || len(addrs) > maxFilterAddrs {
		return nil, fmt.Errorf("afpacket: a filter of %d addresses: want 1 to %d", len(addrs), maxFilterAddrs)
	}
	type step struct {
		ins       bpf.Instruction
		dropIfNe  bool // a JumpIf to drop when not equal
		dropIfSet bool
		nextIfNe  bool // a JumpIf to the next address's test when not equal
		portIfEq  bool // a JumpIf to the port's test when equal
		val       uint32
	}
	var prog []step
	add := func(i bpf.Instruction) { prog = append(prog, step{ins: i}) }
	ne := func(v uint32) { prog = append(prog, step{dropIfNe: true, val: v}) }
	set := func(v uint32) { prog = append(prog, step{dropIfSet: true, val: v}) }
	// The destination's tests: each address's words are compared in turn;
	// a word that differs goes on to the next address (the last one's to
	// drop), a match of the last word to the port's test.
	var nexts []int // the first instruction of each address's test
	dest := func(off uint32, words []uint32) {
		nexts = append(nexts, len(prog))
		for i, w := range words {
			add(bpf.LoadAbsolute{Off: off + uint32(4*i), Size: 4})
			if i == len(words)-1 {
				prog = append(prog, step{portIfEq: true, val: w})
			} else {
				prog = append(prog, step{nextIfNe: true, val: w})
			}
		}
	}
	words := func(a netip.Addr) []uint32 {
		b := a.AsSlice()
		w := make([]uint32, len(b)/4)
		for i := range w {
			w[i] = binary.BigEndian.Uint32(b[4*i:])
		}
		return w
	}
	add(bpf.LoadAbsolute{Off: 12, Size: 2}) // EtherType
	v4 := addrs[0].Is4()
	if v4 {
		ne(0x0800)
		add(bpf.LoadAbsolute{Off: 14 + 9, Size: 1}) // protocol
		ne(17)
		add(bpf.LoadAbsolute{Off: 14 + 6, Size: 2}) // flags, fragment offset
		set(0x3FFF)                                 // MF or an offset
	} else {
		ne(0x86DD)
		add(bpf.LoadAbsolute{Off: 14 + 6, Size: 1}) // next header
		ne(17)
	}
	for _, a := range addrs {
		if a.Is4() != v4 {
			return nil, fmt.Errorf("afpacket: a filter of IPv4 and IPv6 addresses (%v, %v)", addrs[0], a)
		}
		if v4 {
			dest(14+16, words(a))
		} else {
			dest(14+24, words(a))
		}
	}
	nexts = append(nexts, -1) // after the last address: drop
	dropNoAddr := len(prog)
	add(bpf.Jump{}) // to drop, set below
	portAt := len(prog)
	if v4 {
		add(bpf.LoadMemShift{Off: 14})              // X = IHL * 4
		add(bpf.LoadIndirect{Off: 14 + 2, Size: 2}) // UDP destination port
	} else {
		add(bpf.LoadAbsolute{Off: 14 + 40 + 2, Size: 2})
	}
	ne(uint32(port))
	add(bpf.RetConstant{Val: 1 << 18})
	dropAt := len(prog)
	add(bpf.RetConstant{Val: 0})
	ins := make([]bpf.Instruction, len(prog))
	addr := 0 // the address whose test instruction i is in
	for i, s := range prog {
		for addr+1 < len(nexts)-1 && nexts[addr+1] <= i {
			addr++
		}
		next := nexts[addr+1]
		if next < 0 {
			next = dropAt
		}
		switch {
		case s.dropIfNe:
			ins[i] = bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: s.val, SkipTrue: uint8(dropAt - i - 1)}
		case s.dropIfSet:
			ins[i] = bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: s.val, SkipTrue: uint8(dropAt - i - 1)}
		case s.nextIfNe:
			ins[i] = bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: s.val, SkipTrue: uint8(next - i - 1)}
		case s.portIfEq:
			ins[i] = bpf.JumpIf{Cond: bpf.JumpEqual, Val: s.val, SkipTrue: uint8(portAt - i - 1),
				SkipFalse: uint8(next - i - 1)}
		case i == dropNoAddr:
			ins[i] = bpf.Jump{Skip: uint32(dropAt - i - 1)}
		default:
			ins[i] = s.ins
		}
	}
	return bpf.Assemble(ins)
}
