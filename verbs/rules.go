package verbs

import "fmt"

// transition is one allowed QP state change: the attributes it requires
// and those it allows, per QP type (IBTA Vol. 1 §10.3.1 and §11.2.5.3; the
// table ib_modify_qp_is_ok checks in the Linux kernel).
type transition struct {
	valid    bool
	req, opt [4]AttrMask // indexed by QPType - 1: RC, UC, UD, GSI
}

var transitions = func() (t [StateErr + 1][StateErr + 1]transition) {
	const (
		rc, uc, ud, gsi = 0, 1, 2, 3
		alt             = AttrAltPath | AttrPathMigState
	)
	set := func(from, to QPState, req, opt [4]AttrMask) {
		t[from][to] = transition{valid: true, req: req, opt: opt}
	}
	for s := StateReset; s <= StateErr; s++ {
		if s != StateReset {
			set(s, StateErr, [4]AttrMask{}, [4]AttrMask{})
		}
		set(s, StateReset, [4]AttrMask{}, [4]AttrMask{})
	}
	init := [4]AttrMask{
		rc:  AttrPKeyIndex | AttrPort | AttrAccessFlags,
		uc:  AttrPKeyIndex | AttrPort | AttrAccessFlags,
		ud:  AttrPKeyIndex | AttrPort | AttrQKey,
		gsi: AttrPKeyIndex | AttrQKey,
	}
	set(StateReset, StateInit, init, [4]AttrMask{})
	set(StateInit, StateInit, [4]AttrMask{}, init)
	set(StateInit, StateRTR, [4]AttrMask{
		rc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRDAtomic | AttrMinRNRTimer,
		uc: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN,
	}, [4]AttrMask{
		rc:  AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
		uc:  AttrAltPath | AttrAccessFlags | AttrPKeyIndex,
		ud:  AttrPKeyIndex | AttrQKey,
		gsi: AttrPKeyIndex | AttrQKey,
	})
	rts := [4]AttrMask{
		rc:  AttrCurState | AttrAccessFlags | alt | AttrMinRNRTimer,
		uc:  AttrCurState | AttrAccessFlags | alt,
		ud:  AttrCurState | AttrQKey,
		gsi: AttrCurState | AttrQKey,
	}
	set(StateRTR, StateRTS, [4]AttrMask{
		rc:  AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrSQPSN | AttrMaxQPRDAtomic,
		uc:  AttrSQPSN,
		ud:  AttrSQPSN,
		gsi: AttrSQPSN,
	}, rts)
	set(StateRTS, StateRTS, [4]AttrMask{}, rts)
	set(StateSQD, StateRTS, [4]AttrMask{}, rts)
	n := AttrEnSQDAsyncNotfy
	set(StateRTS, StateSQD, [4]AttrMask{}, [4]AttrMask{n, n, n, n})
	set(StateSQD, StateSQD, [4]AttrMask{}, [4]AttrMask{
		rc: AttrPort | AttrAV | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRDAtomic |
			AttrMaxDestRDAtomic | alt | AttrAccessFlags | AttrPKeyIndex | AttrMinRNRTimer,
		uc:  AttrPort | AttrAV | alt | AttrAccessFlags | AttrPKeyIndex,
		ud:  AttrPKeyIndex | AttrQKey,
		gsi: AttrPKeyIndex | AttrQKey,
	})
	set(StateSQE, StateRTS, [4]AttrMask{}, [4]AttrMask{
		uc:  AttrCurState | AttrAccessFlags,
		ud:  AttrCurState | AttrQKey,
		gsi: AttrCurState | AttrQKey,
	})
	return t
}()

// CheckModify checks a modification of a QP of type typ from state cur
// with the attributes in mask (AttrState in it names the next state
// next), by the rules of ibv_modify_qp: each transition requires some
// attributes and allows others. It returns an error wrapping
// ErrInvalidTransition, ErrMissingAttr or ErrExtraAttr, or nil. It checks
// the mask only, not the values.
func CheckModify(typ QPType, cur, next QPState, mask AttrMask) error {
	if typ < RC || typ > GSI {
		return fmt.Errorf("%w: QP type %v: want RC, UC, UD or GSI", ErrInvalidAttr, typ)
	}
	if cur > StateErr || next > StateErr {
		return fmt.Errorf("%w: state %v to %v: states run from RESET to ERR", ErrInvalidAttr, cur, next)
	}
	tr := transitions[cur][next]
	if !tr.valid || typ == RC && cur == StateSQE {
		return fmt.Errorf("%w: %v to %v; from %v a%s QP goes to %s", ErrInvalidTransition, cur, next, cur,
			article(typ), nextStates(typ, cur))
	}
	req, opt := tr.req[typ-1], tr.opt[typ-1]|AttrState|AttrCurState
	if miss := req &^ mask; miss != 0 {
		return fmt.Errorf("%w: %v to %v of a%s QP needs %v: add them to the mask, with their values in QPAttr",
			ErrMissingAttr, cur, next, article(typ), miss)
	}
	if extra := mask &^ (req | opt); extra != 0 {
		return fmt.Errorf("%w: %v to %v of a%s QP does not take %v: leave them out of the mask",
			ErrExtraAttr, cur, next, article(typ), extra)
	}
	return nil
}

// article returns " " or "n " and the type's name, for "a UD QP" and "an
// RC QP".
func article(typ QPType) string {
	if typ == RC || typ == UC {
		return "n " + typ.String()
	}
	return " " + typ.String()
}

// nextStates lists the states a QP of type typ may go to from cur.
func nextStates(typ QPType, cur QPState) string {
	var b []byte
	for next := StateReset; next <= StateErr; next++ {
		if !transitions[cur][next].valid || typ == RC && cur == StateSQE && next != StateReset && next != StateErr {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, next.String()...)
	}
	return string(b)
}

// CheckSendOp reports whether a QP of type typ takes send work requests
// with opcode op: UD only SENDs (with or without immediate), UC no READ,
// atomics, SEND with invalidate, FLUSH or ATOMIC_WRITE (memory windows
// are bound through RC and UC QPs, as ibv_bind_mw says; FLUSH and
// ATOMIC_WRITE are RC's alone, as rxe's rxe_wr_opcode_info has them).
// An unknown QP type is an error wrapping ErrInvalidAttr.
func CheckSendOp(typ QPType, op WROpcode) error {
	switch typ {
	case UD, GSI:
		if op != OpSend && op != OpSendImm {
			return fmt.Errorf("%w: %v on a %v QP, which takes only SEND and SEND_WITH_IMM", ErrInvalidWR, op, typ)
		}
	case UC:
		if op != OpSend && op != OpSendImm && op != OpWrite && op != OpWriteImm && !op.IsLocal() {
			return fmt.Errorf("%w: %v on a UC QP, which takes no READ, atomic, SEND_WITH_INV, FLUSH or ATOMIC_WRITE: "+
				"use an RC QP", ErrInvalidWR, op)
		}
	case RC:
		if !op.Valid() {
			return fmt.Errorf("%w: opcode %v is none of the verbs' send opcodes (OpWrite ... OpSendInv, OpFlush, "+
				"OpAtomicWrite)", ErrInvalidWR, op)
		}
	default:
		return fmt.Errorf("%w: QP type %v: want RC, UC, UD or GSI", ErrInvalidAttr, typ)
	}
	return nil
}
