/*
 * rdmaex.h: the wire format of rdma-example (github.com/animeshtrivedi/rdma-example).
 *
 * After the rdma_cm connection is up (RDMA_PS_TCP, no private data), the
 * client SENDs a 16-byte description of its source buffer and the server
 * answers with a SEND of the same shape describing a buffer it allocated
 * with the length the client asked for. The structure is packed and
 * travels in host byte order (little-endian on x86): address (8 bytes),
 * length (4), steering tag (4, the key the peer uses as its rkey). The
 * client then RDMA WRITEs its string into the server's buffer, READs it
 * back into a second buffer, compares, and disconnects.
 */
#ifndef GOROCE_RDMAEX_H
#define GOROCE_RDMAEX_H

#include <stdint.h>

#define RDMAEX_PORT 20886 /* the examples' default rdma_cm port */
#define RDMAEX_CQ_DEPTH 16
#define RDMAEX_MAX_WR 8
#define RDMAEX_MAX_SGE 2
#define RDMAEX_DEPTH 3 /* initiator depth and responder resources, both sides */
#define RDMAEX_DASHES "---------------------------------------------------------"

struct rdmaex_meta {
	uint64_t addr;
	uint32_t len;
	uint32_t stag;
} __attribute__((packed));

/* rdmaex_show prints a description the way both examples do. */
static inline void rdmaex_show(const struct rdmaex_meta *m)
{
	printf("%s\n", RDMAEX_DASHES);
	printf("buffer attr, addr: %p , len: %u , stag : 0x%x \n", (void *)(uintptr_t)m->addr, m->len, m->stag);
	printf("%s\n", RDMAEX_DASHES);
}

#endif /* GOROCE_RDMAEX_H */
