/*
 * minimal.h: the wire format of the rdma-roce-lab minimal sample
 * (github.com/montybeatnik/rdma-roce-lab, examples/c/minimal).
 *
 * The server registers a 4096-byte buffer (REMOTE_READ|REMOTE_WRITE) that
 * starts with "server-initial" and accepts the rdma_cm connection
 * (RDMA_PS_TCP, default port 7471) with 12 bytes of private data: the
 * buffer's address (8 bytes) and rkey (4), both big-endian. The client
 * connects without private data, RDMA WRITEs "client-wrote-this" with its
 * NUL (18 bytes) to that address, READs 4096 bytes back and prints them.
 * The server waits 2 s after the connection is up, prints its buffer and
 * disconnects. Both sides offer one outstanding READ each way, 7 retries
 * and 7 RNR retries.
 */
#ifndef GOROCE_MINIMAL_H
#define GOROCE_MINIMAL_H

#include <stdint.h>

#define MINIMAL_PORT "7471"
#define MINIMAL_BUF 4096
#define MINIMAL_INFO_LEN 12

/* minimal_pack writes addr and rkey big-endian into the 12 bytes of p. */
static inline void minimal_pack(uint8_t *p, uint64_t addr, uint32_t rkey)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(addr >> (56 - 8 * i));
	for (int i = 0; i < 4; i++)
		p[8 + i] = (uint8_t)(rkey >> (24 - 8 * i));
}

/* minimal_unpack reads them back. */
static inline void minimal_unpack(const uint8_t *p, uint64_t *addr, uint32_t *rkey)
{
	*addr = 0;
	*rkey = 0;
	for (int i = 0; i < 8; i++)
		*addr = *addr << 8 | p[i];
	for (int i = 0; i < 4; i++)
		*rkey = *rkey << 8 | p[8 + i];
}

#endif /* GOROCE_MINIMAL_H */
