/*
 * rdmalib.h: the wire format of rdma-lib, the communication-library seed
 * (github.com/andreibleortu/rdma-lib: ./rdma MODE [HOST]).
 *
 * No rdma_cm: each side opens the first RDMA device, creates a PD, a CQ of
 * 10 entries, an RC QP (10 send and 10 receive work requests, one SGE
 * each) and registers a 4096-byte buffer: LOCAL_WRITE, plus REMOTE_WRITE
 * in write mode, REMOTE_READ in read mode. The client connects over TCP to
 * port 18515 of the server (3 attempts, 1 s apart), writes its 40-byte
 * description and reads the server's; the server reads first, then
 * writes. The description is the program's struct in x86 byte order:
 *
 *    0  u32 QP number (little-endian)     4  padding (zero here)
 *    8  GID[16], of GID index 1 (the IPv4-mapped RoCEv2 GID on rxe)
 *   24  u64 buffer address (little-endian)
 *   32  u32 rkey (little-endian)         36  padding (zero here)
 *
 * PSNs are 0 both ways and never exchanged. The QPs go to INIT (port 1,
 * P_Key index 0, the MR's remote access), RTR (path MTU 1024, min RNR
 * timer 12, one READ as responder, a GRH with hop limit 1 from GID index
 * 1) and RTS (timeout 14, retry 7, RNR retry 7, one READ as requester).
 * Both sides do all of that twice, on two TCP connections in a row: the
 * program's main sets up one connection and then the mode's code sets up
 * its own; only the second QP pair carries traffic, and the first stays
 * up unused until the program ends.
 *
 * The modes, on the second pair:
 *   send   the client SENDs each line of its input with its NUL; the server
 *          prints "Received: LINE" and SENDs "ACK" with its NUL (4 bytes),
 *          which the client receives before its next line ("Server
 *          acknowledged").
 *   write  the client RDMA WRITEs each line with its NUL to offset 0 of the
 *          server's buffer WITH_IMM, the immediate the length in network
 *          byte order; the server's posted receive completes and it prints
 *          "Received (LEN bytes): LINE". The client prints "Message sent
 *          successfully".
 *   read   the server holds a line of text in its buffer; the client reads
 *          "START END" lines and RDMA READs END-START+1 bytes from offset
 *          START, printing "Read data (N bytes from position START): TEXT".
 *   lambda the client RDMA WRITEs machine code that the server executes.
 *          Not implemented here: a peer that never runs received bytes
 *          cannot answer it.
 */
#ifndef GOROCE_RDMALIB_H
#define GOROCE_RDMALIB_H

#include <stdint.h>
#include <string.h>

#define RDMALIB_TCP_PORT 18515
#define RDMALIB_BUF 4096
#define RDMALIB_CQE 10
#define RDMALIB_GID_INDEX 1
#define RDMALIB_INFO_LEN 40
#define RDMALIB_CONNECT_TRIES 3

/* struct rdmalib_info: one side's description, decoded. */
struct rdmalib_info {
	uint32_t qpn;
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
};

static inline void rdmalib_put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t rdmalib_get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* rdmalib_pack writes in into the 40 bytes of p, padding zero. */
static inline void rdmalib_pack(uint8_t *p, const struct rdmalib_info *in)
{
	memset(p, 0, RDMALIB_INFO_LEN);
	rdmalib_put_le(p, in->qpn, 4);
	memcpy(p + 8, in->gid, 16);
	rdmalib_put_le(p + 24, in->addr, 8);
	rdmalib_put_le(p + 32, in->rkey, 4);
}

/* rdmalib_unpack reads the 40 bytes of p into out. */
static inline void rdmalib_unpack(const uint8_t *p, struct rdmalib_info *out)
{
	out->qpn = (uint32_t)rdmalib_get_le(p, 4);
	memcpy(out->gid, p + 8, 16);
	out->addr = rdmalib_get_le(p + 24, 8);
	out->rkey = (uint32_t)rdmalib_get_le(p + 32, 4);
}

#endif /* GOROCE_RDMALIB_H */
