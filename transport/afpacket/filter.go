package afpacket

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/net/bpf"
)

// filter returns a classic BPF program for Ethernet frames that accepts
// untagged, unfragmented UDP to addr and port, and drops the rest.
func filter(addr netip.Addr, port uint16) ([]bpf.RawInstruction, error) {
	type step struct {
		ins       bpf.Instruction
		dropIfNe  bool // a JumpIf to drop when not equal
		dropIfSet bool
		val       uint32
	}
	var prog []step
	add := func(i bpf.Instruction) { prog = append(prog, step{ins: i}) }
	ne := func(v uint32) { prog = append(prog, step{dropIfNe: true, val: v}) }
	set := func(v uint32) { prog = append(prog, step{dropIfSet: true, val: v}) }
	add(bpf.LoadAbsolute{Off: 12, Size: 2}) // EtherType
	if addr.Is4() {
		ne(0x0800)
		add(bpf.LoadAbsolute{Off: 14 + 9, Size: 1}) // protocol
		ne(17)
		add(bpf.LoadAbsolute{Off: 14 + 6, Size: 2}) // flags, fragment offset
		set(0x3FFF)                                 // MF or an offset
		a := addr.As4()
		add(bpf.LoadAbsolute{Off: 14 + 16, Size: 4}) // destination
		ne(binary.BigEndian.Uint32(a[:]))
		add(bpf.LoadMemShift{Off: 14})              // X = IHL * 4
		add(bpf.LoadIndirect{Off: 14 + 2, Size: 2}) // UDP destination port
		ne(uint32(port))
	} else {
		ne(0x86DD)
		add(bpf.LoadAbsolute{Off: 14 + 6, Size: 1}) // next header
		ne(17)
		a := addr.As16()
		for i := 0; i < 16; i += 4 {
			add(bpf.LoadAbsolute{Off: uint32(14 + 24 + i), Size: 4})
			ne(binary.BigEndian.Uint32(a[i:]))
		}
		add(bpf.LoadAbsolute{Off: 14 + 40 + 2, Size: 2})
		ne(uint32(port))
	}
	add(bpf.RetConstant{Val: 1 << 18})
	dropAt := len(prog)
	add(bpf.RetConstant{Val: 0})
	ins := make([]bpf.Instruction, len(prog))
	for i, s := range prog {
		switch {
		case s.dropIfNe:
			ins[i] = bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: s.val, SkipTrue: uint8(dropAt - i - 1)}
		case s.dropIfSet:
			ins[i] = bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: s.val, SkipTrue: uint8(dropAt - i - 1)}
		default:
			ins[i] = s.ins
		}
	}
	return bpf.Assemble(ins)
}
