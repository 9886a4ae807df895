/*
 * flush.h: what flush_server and flush_client share: IBTA 1.5's FLUSH and
 * ATOMIC_WRITE in goroce's session protocol over rdma_cm, as roce server
 * and roce client --mode flush speak it (internal/tool/scenario/flush.go).
 *
 * The client's REQ carries "m=flush a=ADDR k=RKEY l=LEN" (its buffer, hex
 * address and key) as private data. The server registers two regions of
 * 4096 bytes, one with IBV_ACCESS_FLUSH_GLOBAL and one without, and its
 * REP carries "m=flush a=.. k=.. l=.. fa=.. fk=.. pa=.. pk=..": fa/fk the
 * first region, pa/pk the second. Once connected the server adds
 * IBV_ACCESS_FLUSH_GLOBAL to its QP's rights and SENDs "flush-ready". The
 * client then, through the ibv_wr_* API, RDMA WRITEs 256 bytes at 1024 of
 * the first region, FLUSHes that range (global), ATOMIC_WRITEs the 8 bytes
 * of 0x1122334455667788 at 64, READs both back, FLUSHes the whole region,
 * and ends with a FLUSH the server's side must NAK: "qp" (the default)
 * one of the persistent placement type, which the server's QP does not
 * allow (REM_INV_REQ_ERR), "mr" one to the region without FLUSH_GLOBAL
 * (REM_ACCESS_ERR). When the client has gone the server prints what
 * landed. Both print the lines roce --mode flush prints.
 *
 * FLUSH came with rdma-core 45 (IBV_WR_FLUSH, ibv_wr_flush,
 * IBV_ACCESS_FLUSH_GLOBAL, IBV_QP_EX_WITH_FLUSH), ATOMIC_WRITE's builder
 * with rdma-core 39; the Makefile defines HAVE_IBV_FLUSH where the headers
 * have FLUSH. Built without it (Debian 12's rdma-core 44), both programs
 * say so and exit 2.
 */
#ifndef GOROCE_FLUSH_H
#define GOROCE_FLUSH_H

#define FLUSH_PORT "7473"
#define FLUSH_REGION 4096
#define FLUSH_AW_OFF 64
#define FLUSH_WR_OFF 1024
#define FLUSH_WR_LEN 256
#define FLUSH_VALUE 0x1122334455667788ULL
#define FLUSH_READY "flush-ready"

/* flush_pattern fills b with the WRITE's bytes. */
static inline void flush_pattern(uint8_t *b)
{
	for (int i = 0; i < FLUSH_WR_LEN; i++)
		b[i] = (uint8_t)(i * 7 + 3);
}

/* flush_status_name is the verbs name of the statuses the client expects. */
static inline const char *flush_status_name(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return "SUCCESS";
	case IBV_WC_REM_INV_REQ_ERR:
		return "REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR:
		return "REM_ACCESS_ERR";
	case IBV_WC_WR_FLUSH_ERR:
		return "WR_FLUSH_ERR";
	default:
		return ibv_wc_status_str(s);
	}
}

/* flush_without: what a build without rdma-core 45's FLUSH says. */
static inline int flush_without(const char *who)
{
	fprintf(stderr, "%s: built without FLUSH: its libibverbs headers are older than rdma-core 45 "
		"(Debian 12 has 44); build interop/peers where rdma-core 45 or later is installed "
		"(Debian 13's 56)\n", who);
	return 2;
}

#endif /* GOROCE_FLUSH_H */
