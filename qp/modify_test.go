package qp

import (
	"errors"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/verbs"
)

// TestModifyRules walks the ibv_modify_qp transition table: each allowed
// transition with its required attributes succeeds; without one of them,
// with one it does not allow, or to a state it cannot reach, it fails and
// leaves the QP as it was.
func TestModifyRules(t *testing.T) {
	full := verbs.QPAttr{Port: 1, Access: verbs.LocalWrite, QKey: 7, PathMTU: bth.MTU1024, DestQPN: 0x20,
		RQPSN: 5, SQPSN: 9, MaxDestRDAtomic: 4, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRDAtomic: 4, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(addrB)}}
	steps := map[verbs.QPType][]struct {
		to  verbs.QPState
		req verbs.AttrMask
	}{
		verbs.RC: {
			{verbs.StateInit, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.StateRTR, verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer},
			{verbs.StateRTS, verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrSQPSN | verbs.AttrMaxQPRDAtomic},
		},
		verbs.UC: {
			{verbs.StateInit, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
			{verbs.StateRTR, verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
			{verbs.StateRTS, verbs.AttrSQPSN},
		},
		verbs.UD: {
			{verbs.StateInit, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
			{verbs.StateRTR, 0},
			{verbs.StateRTS, verbs.AttrSQPSN},
		},
	}
	for typ, path := range steps {
		t.Run(typ.String(), func(t *testing.T) {
			p := newPair(t, pairOpts{typ: verbs.RC})
			cqi, _ := p.a.dev.CreateCQ(16)
			q, err := p.a.dev.createQP(p.a.pd, &verbs.QPInitAttr{Type: typ, SendCQ: cqi, RecvCQ: cqi})
			must(t, err)
			for _, s := range path {
				from := q.State()
				// Skipping ahead is refused.
				if s.to != verbs.StateRTS {
					a := full
					a.State = verbs.StateRTS
					if err := q.Modify(&a, verbs.AttrState|verbs.AttrSQPSN); !errors.Is(err, verbs.ErrInvalidTransition) {
						t.Errorf("%v to RTS: %v", from, err)
					}
				}
				// Each required attribute is needed.
				for bit := verbs.AttrMask(1); bit <= verbs.AttrDestQPN; bit <<= 1 {
					if s.req&bit == 0 {
						continue
					}
					a := full
					a.State = s.to
					if err := q.Modify(&a, verbs.AttrState|s.req&^bit); !errors.Is(err, verbs.ErrMissingAttr) {
						t.Errorf("%v to %v without %v: %v", from, s.to, bit, err)
					}
				}
				// An attribute the type never takes is refused.
				a := full
				a.State = s.to
				extra := verbs.AttrQKey
				if typ == verbs.UD {
					extra = verbs.AttrAccessFlags
				}
				if err := q.Modify(&a, verbs.AttrState|s.req|extra); !errors.Is(err, verbs.ErrExtraAttr) {
					t.Errorf("%v to %v with %v: %v", from, s.to, extra, err)
				}
				if q.State() != from {
					t.Fatalf("a refused modify changed the state to %v", q.State())
				}
				a = full
				a.State = s.to
				if err := q.Modify(&a, verbs.AttrState|s.req); err != nil {
					t.Fatalf("%v to %v: %v", from, s.to, err)
				}
			}
			// RTS to SQD and back; to ERR and to RESET from anywhere.
			must(t, q.Modify(&verbs.QPAttr{State: verbs.StateSQD}, verbs.AttrState))
			must(t, q.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState))
			must(t, q.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
			if err := q.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState); !errors.Is(err, verbs.ErrInvalidTransition) {
				t.Errorf("ERR to RTS: %v", err)
			}
			must(t, q.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState))
			if q.State() != verbs.StateReset {
				t.Fatalf("state %v after reset", q.State())
			}
		})
	}
}

func TestModifyRefusals(t *testing.T) {
	p := newPair(t, pairOpts{})
	cqi, _ := p.a.dev.CreateCQ(16)
	q, err := p.a.dev.createQP(p.a.pd, &verbs.QPInitAttr{Type: verbs.RC, SendCQ: cqi, RecvCQ: cqi})
	must(t, err)
	init := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	for _, c := range []struct {
		name string
		a    verbs.QPAttr
		mask verbs.AttrMask
		want error
	}{
		{"RESET to RTR", verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState, verbs.ErrInvalidTransition},
		{"RESET to RTS", verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState, verbs.ErrInvalidTransition},
		{"RESET to ERR", verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState, verbs.ErrInvalidTransition},
		{"bad port", verbs.QPAttr{State: verbs.StateInit, Port: 2}, init, verbs.ErrInvalidAttr},
		{"bad P_Key index", verbs.QPAttr{State: verbs.StateInit, Port: 1, PKeyIndex: 3}, init, verbs.ErrInvalidAttr},
		{"unknown access", verbs.QPAttr{State: verbs.StateInit, Port: 1, Access: 1 << 11}, init, verbs.ErrInvalidAttr},
		{"wrong current state", verbs.QPAttr{State: verbs.StateInit, CurState: verbs.StateRTS, Port: 1}, init | verbs.AttrCurState, verbs.ErrInvalidAttr},
	} {
		if err := q.Modify(&c.a, c.mask); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if q.State() != verbs.StateReset {
			t.Fatalf("%s changed the state", c.name)
		}
	}
	must(t, q.Modify(&verbs.QPAttr{State: verbs.StateInit, Port: 1}, init))
	rtr := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
		verbs.AttrMaxDestRDAtomic | verbs.AttrMinRNRTimer
	ok := verbs.QPAttr{State: verbs.StateRTR, PathMTU: bth.MTU1024, DestQPN: 5, AH: verbs.AHAttr{DGID: verbs.GIDFromAddr(addrB)}}
	for _, c := range []struct {
		name string
		edit func(a *verbs.QPAttr)
	}{
		{"MTU 0", func(a *verbs.QPAttr) { a.PathMTU = 0 }},
		{"MTU 8192", func(a *verbs.QPAttr) { a.PathMTU = 6 }},
		{"QPN over 24 bits", func(a *verbs.QPAttr) { a.DestQPN = 1 << 24 }},
		{"PSN over 24 bits", func(a *verbs.QPAttr) { a.RQPSN = 1 << 24 }},
		{"RNR timer over 31", func(a *verbs.QPAttr) { a.MinRNRTimer = 32 }},
		{"no address", func(a *verbs.QPAttr) { a.AH = verbs.AHAttr{} }},
		{"IPv6 peer of an IPv4 device", func(a *verbs.QPAttr) { a.AH.DGID = [16]byte{0x20, 1, 0xd, 0xb8, 15: 1} }},
	} {
		a := ok
		c.edit(&a)
		if err := q.Modify(&a, rtr); !errors.Is(err, verbs.ErrInvalidAttr) {
			t.Errorf("%s: %v", c.name, err)
		}
		if q.State() != verbs.StateInit {
			t.Fatalf("%s changed the state", c.name)
		}
	}
	must(t, q.Modify(&ok, rtr))
	// Posting a send before RTS is refused.
	if err := q.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend}}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Errorf("post in RTR: %v", err)
	}
}
