/*
 * dsahfix: an LD_PRELOAD shim for librdmacm's datagram rsockets on RoCE.
 *
 * A datagram rsocket makes an address handle to its own QP with a LID and
 * no GRH (rsocket.c's ds_add_qp_dest), which a RoCE device refuses
 * (EINVAL): rconnect, rsendto and the receiving service fail. This shim
 * gives such an address handle a GRH to the port's first IPv4-mapped GID
 * (the device's own address), which is what the handle means on RoCE.
 * Address handles that have a GRH pass through unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <infiniband/verbs.h>

typedef struct ibv_ah *(*create_ah_fn)(struct ibv_pd *, struct ibv_ah_attr *);

static int own_gid(struct ibv_context *ctx, uint8_t port, union ibv_gid *gid)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	for (int i = 0; i < 16; i++) {
		if (ibv_query_gid(ctx, port, i, gid))
			return -1;
		if (!memcmp(gid->raw, mapped, sizeof mapped))
			return i;
	}
	return -1;
}

struct ibv_ah *dsahfix_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	static create_ah_fn real;
	struct ibv_port_attr pa;
	struct ibv_ah_attr a;
	int idx;

	if (!real)
		real = (create_ah_fn) dlvsym(RTLD_NEXT, "ibv_create_ah", "IBVERBS_1.1");
	if (!real)
		return NULL;
	if (attr->is_global || ibv_query_port(pd->context, attr->port_num, &pa) ||
	    pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		return real(pd, attr);
	a = *attr;
	idx = own_gid(pd->context, a.port_num, &a.grh.dgid);
	if (idx < 0)
		return real(pd, attr);
	a.is_global = 1;
	a.grh.sgid_index = idx;
	a.grh.hop_limit = 1;
	return real(pd, &a);
}
__asm__(".symver dsahfix_create_ah,ibv_create_ah@@IBVERBS_1.1");
