#include "textflag.h"

// The fold constants are foldK (crc_amd64.go).

// FOLD moves each 128-bit lane of a on by the distance of the constants in
// k and XORs it into b: b ^= a.lo*k.lo ^ a.hi*k.hi. It clobbers a and t.
#define FOLD(k, a, b, t) \
	VPCLMULQDQ $0x11, k, a, t; \
	VPCLMULQDQ $0x00, k, a, a; \
	VPTERNLOGD $0x96, t, a, b

// STEP moves each lane of a on 256 bytes and takes in the 64 bytes at m.
#define STEP(a, m, t) \
	VPCLMULQDQ $0x11, Z0, a, t; \
	VPCLMULQDQ $0x00, Z0, a, a; \
	VPTERNLOGD $0x96, m, t, a

// LANE moves the 128-bit a on by the constants at k into X7.
#define LANE(k, a) \
	VMOVDQU    k, X0; \
	VPCLMULQDQ $0x11, X0, a, X8; \
	VPCLMULQDQ $0x00, X0, a, a; \
	VPXOR      X8, a, a; \
	VPXOR      a, X7, X7

// func fold256(h *[128]byte, init uint32, p []byte) (lo, hi uint64)
TEXT ·fold256(SB), NOSPLIT, $0-56
	MOVQ h+0(FP), DI
	MOVL init+8(FP), AX
	MOVQ p_base+16(FP), SI
	MOVQ p_len+24(FP), CX

	// Z10 is what goes into the first 64 bytes of p: the register in
	// the first four, and the prefix block, if any, moved on to them.
	VMOVD AX, X10
	TESTQ DI, DI
	JZ    first
	VBROADCASTI32X4 ·foldK+16(SB), Z0
	VMOVDQU64 (DI), Z11
	VMOVDQU64 64(DI), Z12
	FOLD(Z0, Z11, Z12, Z5)
	FOLD(Z0, Z12, Z10, Z5)

	// Four accumulators: the first 256 bytes of p.
first:
	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VPXORQ    Z10, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX
	VBROADCASTI32X4 ·foldK+0(SB), Z0

	// Each lane moves 256 bytes on and takes in the bytes there.
loop:
	CMPQ CX, $256
	JB   combine
	STEP(Z1, (SI), Z5)
	STEP(Z2, 64(SI), Z6)
	STEP(Z3, 128(SI), Z7)
	STEP(Z4, 192(SI), Z8)
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop

	// The accumulators into the last, 64 bytes at a time.
combine:
	VBROADCASTI32X4 ·foldK+16(SB), Z0
	FOLD(Z0, Z1, Z2, Z5)
	FOLD(Z0, Z2, Z3, Z6)
	FOLD(Z0, Z3, Z4, Z7)

	// The four lanes of the last into its top lane, 48, 32 and 16 bytes on.
	VEXTRACTI32X4 $1, Z4, X5
	VEXTRACTI32X4 $2, Z4, X6
	VEXTRACTI32X4 $3, Z4, X7
	LANE(·foldK+32(SB), X4)
	LANE(·foldK+48(SB), X5)
	LANE(·foldK+64(SB), X6)

	VMOVQ   X7, AX
	VPEXTRQ $1, X7, BX
	MOVQ    AX, lo+40(FP)
	MOVQ    BX, hi+48(FP)
	VZEROUPPER
	RET

// func cpuid(eax, ecx uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eax+0(FP), AX
	MOVL ecx+4(FP), CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
