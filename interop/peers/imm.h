/*
 * imm.h: the wire format and the output lines of the rdma-roce-lab
 * modular samples' Example 2 (github.com/montybeatnik/rdma-roce-lab,
 * src/server_imm.c and src/client_imm.c: rdma_server_imm and
 * rdma_client_imm).
 *
 * The server listens with rdma_cm (RDMA_PS_TCP, default port 7472),
 * registers a 4096-byte buffer (REMOTE_READ|REMOTE_WRITE) that starts with
 * "server-initial", posts one 64-byte receive (wr_id 100) and accepts with
 * 12 bytes of private data: the buffer's address (8 bytes) and rkey (4),
 * big-endian, as the minimal sample's (minimal.h). The accept offers one
 * outstanding READ each way, 7 retries and 7 RNR retries. The client
 * connects without private data (initiator depth and responder resources
 * 0, 7 retries, 7 RNR retries), RDMA WRITEs "client-wrote-with-imm" with
 * its NUL (22 bytes) to that address WITH_IMM, the immediate being the
 * length, 22, in network byte order. That consumes the server's receive:
 * the server prints the immediate and its buffer and disconnects; the
 * client disconnects after its WRITE completes.
 *
 * Both programs print their steps on stderr as
 * "[HH:MM:SS.mmm #NNNN function] TAG   text" (the samples are built with
 * RDMA_VERBOSE); imm_log prints that form. The lines that matter:
 *   server: "got RECV with IMM", "  imm_data host=22",
 *           "after WRITE_WITH_IMM, buf='client-wrote-with-imm'"
 *   client: "RDMA_WRITE_WITH_IMM completed"
 */
#ifndef GOROCE_IMM_H
#define GOROCE_IMM_H

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#include "minimal.h"

#define IMM_PORT "7472"
#define IMM_BUF 4096
#define IMM_NOTE_LEN 64    /* the server's receive buffer */
#define IMM_NOTE_WR_ID 100 /* and its wr_id */
#define IMM_SERVER_TEXT "server-initial"
#define IMM_CLIENT_TEXT "client-wrote-with-imm"

static unsigned long imm_step;

/* imm_log prints one step line in the samples' form on stderr. */
static inline void __attribute__((format(printf, 3, 4))) imm_log(const char *fn, const char *tag, const char *fmt, ...)
{
	struct timeval tv;
	struct tm tm;
	va_list ap;

	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	fprintf(stderr, "[%02d:%02d:%02d.%03ld #%04lu %s] %-5s ", tm.tm_hour, tm.tm_min, tm.tm_sec,
		(long)(tv.tv_usec / 1000), ++imm_step, fn, tag);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* imm_env_u8: an 8-bit setting from the environment, def when unset. */
static inline uint8_t imm_env_u8(const char *name, uint8_t def)
{
	const char *s = getenv(name);
	return s && *s ? (uint8_t)strtoul(s, NULL, 10) : def;
}

#endif /* GOROCE_IMM_H */
