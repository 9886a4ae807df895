package bth

import (
	"strconv"
	"time"
)

// Syndrome is the AETH syndrome byte (IBTA Vol. 1 §9.7.5.1, Table 44):
//
//	bit 7     reserved, 0
//	bits 6-5  00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//	bits 4-0  ACK: credit count code; RNR NAK: timer code; NAK: NAK code
type Syndrome uint8

// AckKind is the kind of an AETH syndrome.
type AckKind uint8

// Kinds of syndrome.
const (
	KindACK      AckKind = 0
	KindRNRNAK   AckKind = 1
	KindReserved AckKind = 2
	KindNAK      AckKind = 3
)

// String returns the name of the AckKind.
func (k AckKind) String() string {
	switch k {
	case KindACK:
		return "ACK"
	case KindRNRNAK:
		return "RNR_NAK"
	case KindNAK:
		return "NAK"
	}
	return "RESERVED"
}

// NAKCode is the value of a NAK syndrome (IBTA Vol. 1 Table 44).
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSequenceError  NAKCode = 0
	NAKInvalidRequest    NAKCode = 1
	NAKRemoteAccessError NAKCode = 2
	NAKRemoteOpError     NAKCode = 3
	NAKInvalidRDRequest  NAKCode = 4
)

// NoCredits is the ACK credit code that means end-to-end flow control is
// not in use; rxe sends it in every ACK.
const NoCredits = 31

const (
	syndromeKindShift = 5
	syndromeValueMask = 0x1F
	maxRNRTimerCode   = 31
)

var nakNames = [...]string{"PSN_SEQUENCE_ERROR", "INVALID_REQUEST", "REMOTE_ACCESS_ERROR",
	"REMOTE_OPERATIONAL_ERROR", "INVALID_RD_REQUEST"}

// String returns the name of the NAKCode.
func (c NAKCode) String() string {
	if int(c) < len(nakNames) {
		return nakNames[c]
	}
	return "NAK_" + strconv.Itoa(int(c))
}

// ACKSyndrome returns the syndrome of an ACK with the given credit code
// (NoCredits when end-to-end flow control is not used, as rxe does).
func ACKSyndrome(credit uint8) Syndrome { return Syndrome(credit & syndromeValueMask) }

// RNRNAKSyndrome returns the syndrome of an RNR NAK with the given timer code.
func RNRNAKSyndrome(timer uint8) Syndrome {
	return Syndrome(uint8(KindRNRNAK)<<syndromeKindShift | timer&syndromeValueMask)
}

// NAKSyndrome returns the syndrome of a NAK with the given code.
func NAKSyndrome(code NAKCode) Syndrome {
	return Syndrome(uint8(KindNAK)<<syndromeKindShift | uint8(code)&syndromeValueMask)
}

// Kind returns whether the syndrome is an ACK, an RNR NAK or a NAK.
func (s Syndrome) Kind() AckKind { return AckKind(s>>syndromeKindShift) & 3 }

// Value returns the low five bits: credit code, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & syndromeValueMask }

// NAKCode returns the NAK code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String describes the syndrome, such as "ACK credit 31", "RNR_NAK timer 19
// (5.12ms)" or "NAK PSN_SEQUENCE_ERROR".
func (s Syndrome) String() string {
	switch s.Kind() {
	case KindACK:
		return "ACK credit " + strconv.Itoa(int(s.Value()))
	case KindRNRNAK:
		return "RNR_NAK timer " + strconv.Itoa(int(s.Value())) + " (" + RNRTimerDuration(s.Value()).String() + ")"
	case KindNAK:
		return "NAK " + s.NAKCode().String()
	}
	return "RESERVED 0x" + strconv.FormatUint(uint64(s), 16)
}

// rnrTimerMicros maps an RNR NAK timer code to its minimum wait in
// microseconds (IBTA Vol. 1 Table 45). Code 0 is the longest, 655.36 ms.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// RNRTimerDuration returns the minimum RNR wait for a 5-bit timer code.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&maxRNRTimerCode]) * time.Microsecond
}

// RNRTimerCode returns the smallest timer code whose duration is at least d,
// or 0 (655.36 ms, the longest) when d exceeds 491.52 ms.
func RNRTimerCode(d time.Duration) uint8 {
	best := uint8(0)
	for code := uint8(1); code <= maxRNRTimerCode; code++ {
		cd := RNRTimerDuration(code)
		if cd >= d && (best == 0 || cd < RNRTimerDuration(best)) {
			best = code
		}
	}
	return best
}

// ACKTimeout returns the local ACK timeout for the 5-bit timeout attribute
// of a QP: 4.096 µs × 2^t, and 0 (no timer) for t = 0 (IBTA Vol. 1 §9.7.6.1.3).
func ACKTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(4096<<(t&31)) * time.Nanosecond
}
