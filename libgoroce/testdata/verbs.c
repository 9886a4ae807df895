/*
 * verbs: every verb's success and error returns on goroce's device, as
 * libibverbs' man pages and kernel rxe give them. Each errno is the one
 * rxe returns for the same call unless a comment says why goroce's
 * differs.
 *
 *	verbs DEVICE
 *
 *	verbs --strings
 * prints what the pure helpers (ibv_wc_status_str, rates, ...) return,
 * for a comparison with the real libibverbs'.
 */
#include "gtest.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid0;
static struct ibv_device_attr dattr;

/* Static memory to register: .data and .bss. */
static char data_buf[3 * 4096] = {1};
static char bss_buf[3 * 4096];

/* unmapped returns an address where nothing is mapped now. */
static void *unmapped(void)
{
	void *p = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(p, 8192);
	return p;
}

static void *page_alloc(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return p;
}

/* A loopback RC pair with one CQ, for the data-path checks. */
struct pair {
	struct ibv_cq *cq;
	struct ibv_qp *a, *b;
};

static struct pair make_pair(enum ibv_qp_type t, int wr, int access)
{
	struct pair p;
	p.cq = OK(ibv_create_cq(ctx, 256, NULL, NULL, 0));
	p.a = OK(make_qp(pd, t, p.cq, p.cq, NULL, wr, 4));
	p.b = OK(make_qp(pd, t, p.cq, p.cq, NULL, wr, 4));
	MUST(connect_pair(p.a, p.b, &gid0, access));
	return p;
}

static void free_pair(struct pair *p)
{
	MUST(ibv_destroy_qp(p->a));
	MUST(ibv_destroy_qp(p->b));
	MUST(ibv_destroy_cq(p->cq));
}

/* write_ok WRITEs len bytes of src (lkey) to raddr (rkey) over p and
 * reports the completion's status. */
static int write_status(struct pair *p, void *src, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;
	if (post_write(p->a, 7, src, len, lkey, raddr, rkey))
		return -1;
	if (poll_n(p->cq, &wc, 1, 5000) != 1)
		return -2;
	return wc.status;
}

static void test_device(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l && n >= 1, "ibv_get_device_list: %d devices", n);
	ibv_free_device_list(l);

	EQ_ERR(ibv_query_device(ctx, &dattr), 0);
	CHECK(dattr.phys_port_cnt == 1 && dattr.max_qp > 0 && dattr.max_cqe > 0 && dattr.max_mr_size > 0,
	      "ibv_query_device: ports %d, max_qp %d", dattr.phys_port_cnt, dattr.max_qp);
	CHECK(dattr.vendor_id == 0x676f72, "vendor_id %#x", dattr.vendor_id);
	CHECK(dattr.node_guid == ibv_get_device_guid(ctx->device), "node_guid differs from ibv_get_device_guid");
	CHECK(dattr.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "no IBV_DEVICE_MEM_WINDOW");

	struct ibv_device_attr_ex ax;
	EQ_ERR(ibv_query_device_ex(ctx, NULL, &ax), 0);
	CHECK(!memcmp(&ax.orig_attr, &dattr, sizeof dattr), "ibv_query_device_ex's orig_attr differs");
	struct ibv_query_device_ex_input in = {.comp_mask = 1};
	EQ_ERR(ibv_query_device_ex(ctx, &in, &ax), EINVAL);

	struct ibv_port_attr pa;
	EQ_ERR(ibv_query_port(ctx, 1, &pa), 0);
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.gid_tbl_len >= 1 &&
		      pa.active_mtu >= IBV_MTU_1024 && pa.pkey_tbl_len >= 1,
	      "ibv_query_port: state %d, link layer %d, gids %d, mtu %d", pa.state, pa.link_layer, pa.gid_tbl_len,
	      pa.active_mtu);
	EQ_ERR(ibv_query_port(ctx, 2, &pa), EINVAL);
	EQ_ERR(ibv_query_port(ctx, 0, &pa), EINVAL);

	EQ_ERR(ibv_query_gid(ctx, 1, 0, &gid0), 0);
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	CHECK(!memcmp(gid0.raw, v4mapped, 12) && gid0.raw[12] == 127, "GID 0 is not an IPv4 loopback address");
	union ibv_gid g;
	CHECK(ibv_query_gid(ctx, 2, 0, &g) == -1, "ibv_query_gid of port 2 succeeded");
	CHECK(ibv_query_gid(ctx, 1, pa.gid_tbl_len, &g) == -1, "ibv_query_gid past the table succeeded");
	memset(&g, 0xaa, sizeof g);
	/* An empty entry of the table reads as zeros, as libibverbs has it. */
	CHECK(ibv_query_gid(ctx, 1, pa.gid_tbl_len - 1, &g) == 0 && g.global.interface_id == 0,
	      "an empty GID entry is not zeros");

	struct ibv_gid_entry e;
	EQ_ERR(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
	CHECK(e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.gid_index == 0 && e.port_num == 1 && !memcmp(&e.gid, &gid0, 16),
	      "ibv_query_gid_ex: type %d", e.gid_type);
	EQ_ERR(ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len - 1, &e, 0), ENODATA);
	EQ_ERR(ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &e, 0), EINVAL);
	EQ_ERR(ibv_query_gid_ex(ctx, 2, 0, &e, 0), EINVAL);
	struct ibv_gid_entry tab[64];
	ssize_t ng = ibv_query_gid_table(ctx, tab, 64, 0);
	CHECK(ng >= 1 && !memcmp(&tab[0].gid, &gid0, 16), "ibv_query_gid_table = %zd", ng);

	__be16 pkey = 0;
	EQ_ERR(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
	CHECK(pkey == htobe16(0xffff), "pkey %#x", be16toh(pkey));
	CHECK(ibv_query_pkey(ctx, 1, pa.pkey_tbl_len, &pkey) == -1, "ibv_query_pkey past the table succeeded");
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0, "ibv_get_pkey_index(0xffff)");
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) < 0, "ibv_get_pkey_index(0x1234) found it");
}

static void test_pd(void)
{
	struct ibv_pd *p = OK(ibv_alloc_pd(ctx));
	CHECK(p->context == ctx, "pd->context");
	char *b = page_alloc(4096);
	struct ibv_mr *mr = OK(ibv_reg_mr(p, b, 4096, IBV_ACCESS_LOCAL_WRITE));
	/* The kernel refuses to free a PD its objects use. */
	EQ_ERR(ibv_dealloc_pd(p), EBUSY);
	EQ_ERR(ibv_dereg_mr(mr), 0);
	struct ibv_cq *cq = OK(ibv_create_cq(ctx, 4, NULL, NULL, 0));
	struct ibv_qp *qp = OK(make_qp(p, IBV_QPT_RC, cq, cq, NULL, 4, 1));
	EQ_ERR(ibv_dealloc_pd(p), EBUSY);
	EQ_ERR(ibv_destroy_qp(qp), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);
	EQ_ERR(ibv_dealloc_pd(p), 0);
	munmap(b, 4096);
}

/* reg_access registers 2 pages with access and reports the errno. */
static int reg_access(void *b, int access)
{
	errno = 0;
	struct ibv_mr *m = ibv_reg_mr(pd, b, 8192, access);
	if (!m)
		return errno ? errno : -1;
	int r = ibv_dereg_mr(m);
	return r ? 1000 + r : 0;
}

/* check_rw writes through a region and reads the bytes back where the
 * program has them: the remapping kept the memory the program's. */
static void check_rw(struct pair *p, char *dst, size_t len, const char *what)
{
	char *src = page_alloc(len);
	struct ibv_mr *smr = OK(ibv_reg_mr(pd, src, len, IBV_ACCESS_LOCAL_WRITE));
	struct ibv_mr *dmr = OK(ibv_reg_mr(pd, dst, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	for (size_t i = 0; i < len; i++)
		src[i] = (char)(i * 7 + 3);
	int st = write_status(p, src, (uint32_t)len, smr->lkey, (uintptr_t)dst, dmr->rkey);
	CHECK(st == IBV_WC_SUCCESS, "%s: WRITE status %d", what, st);
	CHECK(!memcmp(src, dst, len), "%s: the bytes written are not where the program reads them", what);
	EQ_ERR(ibv_dereg_mr(dmr), 0);
	CHECK(!memcmp(src, dst, len), "%s: the bytes changed at ibv_dereg_mr", what);
	dst[0] = 42; /* still writable */
	EQ_ERR(ibv_dereg_mr(smr), 0);
	munmap(src, len);
}

/* A registration on the stack: the library remaps the pages of this very
 * frame. */
static __attribute__((noinline)) void stack_region(struct pair *p)
{
	char buf[3 * 4096];
	volatile int canary = 0x5a5a;
	memset(buf, 1, sizeof buf);
	check_rw(p, buf + 100, 5000, "a region on the stack");
	CHECK(canary == 0x5a5a, "the stack around the region changed");
}

static void test_mr(void)
{
	char *b = page_alloc(8192);
	int LW = IBV_ACCESS_LOCAL_WRITE;
	/* Every flag, alone and in the combinations the kernel allows. */
	EQ_ERR(reg_access(b, 0), 0);
	EQ_ERR(reg_access(b, LW), 0);
	EQ_ERR(reg_access(b, LW | IBV_ACCESS_REMOTE_WRITE), 0);
	EQ_ERR(reg_access(b, IBV_ACCESS_REMOTE_READ), 0);
	EQ_ERR(reg_access(b, LW | IBV_ACCESS_REMOTE_ATOMIC), 0);
	EQ_ERR(reg_access(b, IBV_ACCESS_MW_BIND), 0);
	EQ_ERR(reg_access(b, LW | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
				     IBV_ACCESS_MW_BIND),
	       0);
	/* A hint and the optional flags a device may ignore. */
	EQ_ERR(reg_access(b, LW | IBV_ACCESS_HUGETLB), 0);
	EQ_ERR(reg_access(b, LW | IBV_ACCESS_RELAXED_ORDERING), 0);
	EQ_ERR(reg_access(b, LW | (1 << 29)), 0);
	/* ib_check_mr_access: remote write or atomic needs local write. */
	EQ_ERR(reg_access(b, IBV_ACCESS_REMOTE_WRITE), EINVAL);
	EQ_ERR(reg_access(b, IBV_ACCESS_REMOTE_ATOMIC), EINVAL);
	/* No on-demand paging. */
	EQ_ERR(reg_access(b, LW | IBV_ACCESS_ON_DEMAND), EOPNOTSUPP);
	/* A bit no flag has. */
	EQ_ERR(reg_access(b, LW | (1 << 14)), EINVAL);

	struct ibv_mr *m = OK(ibv_reg_mr(pd, b + 10, 100, LW | IBV_ACCESS_REMOTE_READ));
	CHECK(m->addr == b + 10 && m->length == 100 && m->pd == pd && m->context == ctx && m->lkey && m->rkey,
	      "ibv_reg_mr's fields: addr %p length %zu", m->addr, m->length);
	EQ_ERR(ibv_dereg_mr(m), 0);

	/* No bytes: goroce refuses a region of none (EINVAL), as
	 * libibverbs' ibv_reg_mr documents no meaning for it. */
	NULL_ERR(ibv_reg_mr(pd, b, 0, LW), EINVAL);
	/* Unmapped memory: the kernel cannot pin it. */
	NULL_ERR(ibv_reg_mr(pd, unmapped(), 8192, LW), EFAULT);
	char *half = page_alloc(2 * 4096);
	munmap(half + 4096, 4096);
	NULL_ERR(ibv_reg_mr(pd, half, 8192, LW), EFAULT); /* half of it mapped */
	munmap(half, 4096);
	/* Read-only memory: readable regions yes, writable ones no. */
	char *ro = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	NULL_ERR(ibv_reg_mr(pd, ro, 8192, LW), EFAULT);
	NULL_ERR(ibv_reg_mr(pd, ro, 8192, IBV_ACCESS_MW_BIND), EFAULT);
	m = ibv_reg_mr(pd, ro, 8192, IBV_ACCESS_REMOTE_READ);
	CHECK(m, "a read-only region of read-only memory: %s", strerror(errno));
	if (m)
		EQ_ERR(ibv_dereg_mr(m), 0);
	/* An address past the user address space. */
	NULL_ERR(ibv_reg_mr(pd, (void *)(1ULL << 48), 4096, LW), EFAULT);

	/* ibv_reg_mr_iova: the region is reached at the iova. The kernel
	 * wants the address and the iova at the same offset in a page. */
	struct pair p = make_pair(IBV_QPT_RC, 16, LW | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	char *src = page_alloc(4096), *dst = page_alloc(8192);
	struct ibv_mr *smr = OK(ibv_reg_mr(pd, src, 4096, LW));
	struct ibv_mr *im = OK(ibv_reg_mr_iova(pd, dst + 64, 4096, 0x7000000040ULL, LW | IBV_ACCESS_REMOTE_WRITE));
	memcpy(src, "iova!", 6);
	int st = write_status(&p, src, 6, smr->lkey, 0x7000000040ULL + 8, im->rkey);
	CHECK(st == IBV_WC_SUCCESS && !memcmp(dst + 72, "iova!", 6), "a WRITE at the iova: status %d", st);
	st = write_status(&p, src, 6, smr->lkey, (uintptr_t)dst + 72, im->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE at the address of an iova region: status %d, want %d", st,
	      IBV_WC_REM_ACCESS_ERR);
	EQ_ERR(ibv_dereg_mr(im), 0);
	NULL_ERR(ibv_reg_mr_iova(pd, dst + 64, 4096, 0x7000000000ULL, LW), EINVAL);
	free_pair(&p);

	/* Overlapping and repeated registrations of the same pages: each
	 * is a region of its own; the pages stay shared until the last
	 * goes, and stay the program's after. */
	p = make_pair(IBV_QPT_RC, 16, LW | IBV_ACCESS_REMOTE_WRITE);
	char *big = page_alloc(4 * 4096);
	memset(big, 0x33, 4 * 4096);
	struct ibv_mr *m1 = OK(ibv_reg_mr(pd, big, 2 * 4096, LW | IBV_ACCESS_REMOTE_WRITE));
	struct ibv_mr *m2 = OK(ibv_reg_mr(pd, big + 4096 + 17, 2 * 4096, LW | IBV_ACCESS_REMOTE_WRITE));
	struct ibv_mr *m3 = OK(ibv_reg_mr(pd, big, 2 * 4096, LW | IBV_ACCESS_REMOTE_WRITE));
	CHECK(m1->rkey != m3->rkey && m1->lkey != m3->lkey, "two registrations of the same bytes share keys");
	memcpy(src, "overlap", 8);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)big + 4096 + 20, m2->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(big + 4096 + 20, "overlap", 8),
	      "a WRITE through the second of two overlapping regions");
	EQ_ERR(ibv_dereg_mr(m1), 0);
	memcpy(src, "after-1", 8);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)big + 4096 + 40, m3->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(big + 4096 + 40, "after-1", 8),
	      "a WRITE through a repeated region after the first went");
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)big + 3 * 4096, m2->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(big + 3 * 4096, "after-1", 8),
	      "a WRITE through the overlapping region after the first went");
	EQ_ERR(ibv_dereg_mr(m3), 0);
	EQ_ERR(ibv_dereg_mr(m2), 0);
	CHECK(big[0] == 0x33 && !memcmp(big + 4096 + 40, "after-1", 8) && !memcmp(big + 3 * 4096, "after-1", 8) &&
		      big[4 * 4096 - 1] == 0x33,
	      "the pages lost their bytes when the last region went");
	big[5] = 1; /* still the program's, and writable */
	munmap(big, 4 * 4096);

	/* The stack, .data and .bss. */
	stack_region(&p);
	check_rw(&p, data_buf + 5, 2 * 4096, "a region in .data");
	check_rw(&p, bss_buf + 5, 2 * 4096, "a region in .bss");
	CHECK(data_buf[0] == 1, ".data around the region changed");

	/* ibv_rereg_mr, each flag. */
	char *b2 = page_alloc(8192);
	m = OK(ibv_reg_mr(pd, dst, 4096, LW));
	uint32_t rkey0 = m->rkey;
	EQ_ERR(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, LW | IBV_ACCESS_REMOTE_WRITE), 0);
	memcpy(src, "rereg-a", 8);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)dst, m->rkey) == IBV_WC_SUCCESS && !memcmp(dst, "rereg-a", 8),
	      "a WRITE after IBV_REREG_MR_CHANGE_ACCESS gave remote write");
	(void)rkey0;
	EQ_ERR(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b2 + 8, 100, 0), 0);
	CHECK(m->addr == b2 + 8 && m->length == 100, "ibv_rereg_mr's new translation: %p %zu", m->addr, m->length);
	memcpy(src, "rereg-t", 8);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)b2 + 8, m->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(b2 + 8, "rereg-t", 8),
	      "a WRITE after IBV_REREG_MR_CHANGE_TRANSLATION");
	struct ibv_pd *pd2 = OK(ibv_alloc_pd(ctx));
	EQ_ERR(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0), 0);
	CHECK(m->pd == pd2, "ibv_rereg_mr's new PD");
	/* A region of another PD than the QP's: the responder refuses. */
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)b2 + 8, m->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE to a region moved to another PD");
	free_pair(&p);
	p = make_pair(IBV_QPT_RC, 16, LW | IBV_ACCESS_REMOTE_WRITE);
	EQ_ERR(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd, NULL, 0, LW), 0);
	CHECK(m->pd == pd, "ibv_rereg_mr's PD back");
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)b2 + 8, m->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE to a region whose remote write was taken away");
	free_pair(&p);
	p = make_pair(IBV_QPT_RC, 16, LW | IBV_ACCESS_REMOTE_WRITE);
	/* A read-only region moved onto read-only memory: no write
	 * access asked, none needed. */
	EQ_ERR(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_READ), 0);
	EQ_ERR(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, ro, 4096, 0), 0);
	/* Bad input: the old region stays valid. */
	CHECK(ibv_rereg_mr(m, 0, NULL, NULL, 0, 0) != 0 && errno == EINVAL, "ibv_rereg_mr without flags");
	CHECK(ibv_rereg_mr(m, 1 << 5, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL,
	      "ibv_rereg_mr with an unknown flag");
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 4096, 0) == IBV_REREG_MR_ERR_INPUT &&
		      errno == EINVAL,
	      "ibv_rereg_mr to no address");
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, unmapped(), 4096, 0) != 0 && errno == EFAULT,
	      "ibv_rereg_mr onto unmapped memory: errno %d", errno);
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) != 0 && errno == EINVAL,
	      "ibv_rereg_mr to remote write without local write: errno %d", errno);
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_ON_DEMAND) != 0 &&
		      errno == EOPNOTSUPP,
	      "ibv_rereg_mr to on-demand paging: errno %d", errno);
	EQ_ERR(ibv_dereg_mr(m), 0);
	EQ_ERR(ibv_dealloc_pd(pd2), 0);
	EQ_ERR(ibv_dereg_mr(smr), 0);
	free_pair(&p);
	munmap(ro, 8192);
	munmap(b, 8192);
	munmap(b2, 8192);
	munmap(src, 4096);
	munmap(dst, 8192);

	/* Not goroce's: device memory behind a dma-buf. */
	NULL_ERR(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, 3, LW), EOPNOTSUPP);
}

static void test_mw(void)
{
	int LW = IBV_ACCESS_LOCAL_WRITE, RW = IBV_ACCESS_REMOTE_WRITE;
	struct pair p = make_pair(IBV_QPT_RC, 16, LW | RW | IBV_ACCESS_REMOTE_READ);
	char *src = page_alloc(4096), *dst = page_alloc(8192);
	struct ibv_mr *smr = OK(ibv_reg_mr(pd, src, 4096, LW));
	struct ibv_mr *dmr = OK(ibv_reg_mr(pd, dst, 8192, LW | IBV_ACCESS_MW_BIND));
	struct ibv_mr *nobind = OK(ibv_reg_mr(pd, dst, 4096, LW));
	struct ibv_wc wc;

	NULL_ERR(ibv_alloc_mw(pd, (enum ibv_mw_type)3), EINVAL);
	struct ibv_mw *w1 = OK(ibv_alloc_mw(pd, IBV_MW_TYPE_1));
	struct ibv_mw *w2 = OK(ibv_alloc_mw(pd, IBV_MW_TYPE_2));
	CHECK(w1->type == IBV_MW_TYPE_1 && w2->type == IBV_MW_TYPE_2 && w1->pd == pd && w1->context == ctx,
	      "ibv_alloc_mw's fields");

	/* Type 1: ibv_bind_mw, a work request of its own. */
	uint32_t old = w1->rkey;
	struct ibv_mw_bind bind = {.wr_id = 11,
				   .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = dmr, .addr = (uintptr_t)dst, .length = 4096, .mw_access_flags = RW}};
	EQ_ERR(ibv_bind_mw(p.b, w1, &bind), 0);
	CHECK(w1->rkey != old && (w1->rkey & ~0xffu) == (old & ~0xffu), "ibv_bind_mw's new rkey %#x (old %#x)", w1->rkey,
	      old);
	CHECK(poll_n(p.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW &&
		      wc.wr_id == 11,
	      "ibv_bind_mw's completion: status %d opcode %d wr_id %llu", wc.status, wc.opcode,
	      (unsigned long long)wc.wr_id);
	memcpy(src, "window1", 8);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)dst + 8, w1->rkey) == IBV_WC_SUCCESS &&
		      !memcmp(dst + 8, "window1", 8),
	      "a WRITE through a type 1 window");
	/* goroce refuses to deregister a region a window is bound to with
	 * EBUSY, as the kernel answers for other objects in use; rxe
	 * answers EINVAL (IBA 10.6.7.2.6 says only that it fails). */
	EQ_ERR(ibv_dereg_mr(dmr), EBUSY);
	/* ibv_bind_mw binds type 1 windows only. */
	EQ_ERR(ibv_bind_mw(p.b, w2, &bind), EINVAL);
	/* A bind to a region without IBV_ACCESS_MW_BIND fails in its
	 * completion. */
	struct pair q = make_pair(IBV_QPT_RC, 16, LW | RW);
	struct ibv_mw *w3 = OK(ibv_alloc_mw(pd, IBV_MW_TYPE_1));
	struct ibv_mw_bind bad = {.wr_id = 12,
				  .send_flags = IBV_SEND_SIGNALED,
				  .bind_info = {.mr = nobind, .addr = (uintptr_t)dst, .length = 4096, .mw_access_flags = RW}};
	EQ_ERR(ibv_bind_mw(q.a, w3, &bad), 0);
	CHECK(poll_n(q.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_MW_BIND_ERR && wc.wr_id == 12,
	      "a bind to a region without MW_BIND: status %d, want %d", wc.status, IBV_WC_MW_BIND_ERR);
	free_pair(&q);
	EQ_ERR(ibv_dealloc_mw(w3), 0);

	/* Type 2: BIND_MW work requests, LOCAL_INV, SEND_WITH_INV. */
	struct ibv_send_wr wr = {.wr_id = 21, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *badwr;
	wr.bind_mw.mw = w2;
	wr.bind_mw.rkey = ibv_inc_rkey(w2->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = dmr, .addr = (uintptr_t)dst + 4096, .length = 4096,
							 .mw_access_flags = RW};
	EQ_ERR(ibv_post_send(p.b, &wr, &badwr), 0);
	CHECK(poll_n(p.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW &&
		      wc.wr_id == 21,
	      "BIND_MW's completion: status %d opcode %d", wc.status, wc.opcode);
	uint32_t r2 = wr.bind_mw.rkey;
	memcpy(src, "window2", 8);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)dst + 4096, r2) == IBV_WC_SUCCESS &&
		      !memcmp(dst + 4096, "window2", 8),
	      "a WRITE through a type 2 window");
	/* A type 2 window binds through BIND_MW only. */
	struct ibv_send_wr w1wr = wr;
	w1wr.bind_mw.mw = w1;
	EQ_ERR(ibv_post_send(p.b, &w1wr, &badwr), EINVAL);
	CHECK(badwr == &w1wr, "bad_wr of a BIND_MW of a type 1 window");
	struct ibv_send_wr inv = {.wr_id = 22, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
	inv.invalidate_rkey = r2;
	EQ_ERR(ibv_post_send(p.b, &inv, &badwr), 0);
	CHECK(poll_n(p.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV &&
		      wc.wr_id == 22,
	      "LOCAL_INV's completion: status %d opcode %d", wc.status, wc.opcode);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)dst + 4096, r2) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE through an invalidated window");
	free_pair(&p);

	/* SEND_WITH_INV: the responder's window goes with the message. */
	p = make_pair(IBV_QPT_RC, 16, LW | RW);
	wr.bind_mw.rkey = ibv_inc_rkey(r2);
	EQ_ERR(ibv_post_send(p.b, &wr, &badwr), 0);
	CHECK(poll_n(p.cq, &wc, 1, 5000) == 1 && wc.status == IBV_WC_SUCCESS, "a second BIND_MW: status %d", wc.status);
	r2 = wr.bind_mw.rkey;
	char *rbuf = dst + 100;
	EQ_ERR(post_recv1(p.b, 31, rbuf, 64, dmr->lkey), 0);
	struct ibv_sge sg = {.addr = (uintptr_t)src, .length = 8, .lkey = smr->lkey};
	struct ibv_send_wr sinv = {.wr_id = 32, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				   .send_flags = IBV_SEND_SIGNALED};
	sinv.invalidate_rkey = r2;
	EQ_ERR(ibv_post_send(p.a, &sinv, &badwr), 0);
	struct ibv_wc w[2];
	int n = poll_n(p.cq, w, 2, 5000);
	int seen = 0;
	for (int i = 0; i < n; i++) {
		if (w[i].wr_id == 31)
			seen |= (w[i].status == IBV_WC_SUCCESS && w[i].opcode == IBV_WC_RECV &&
				 w[i].wc_flags & IBV_WC_WITH_INV && w[i].invalidated_rkey == r2)
					? 1
					: 4;
		if (w[i].wr_id == 32)
			seen |= w[i].status == IBV_WC_SUCCESS && w[i].opcode == IBV_WC_SEND ? 2 : 8;
	}
	CHECK(seen == 3, "SEND_WITH_INV's completions: %d of 2, flags %#x", n, n ? w[0].wc_flags : 0);
	CHECK(write_status(&p, src, 8, smr->lkey, (uintptr_t)dst + 4096, r2) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE through a window SEND_WITH_INV invalidated");
	free_pair(&p);

	EQ_ERR(ibv_dealloc_mw(w1), 0);
	EQ_ERR(ibv_dealloc_mw(w2), 0);
	EQ_ERR(ibv_dereg_mr(dmr), 0);
	EQ_ERR(ibv_dereg_mr(nobind), 0);
	EQ_ERR(ibv_dereg_mr(smr), 0);
	munmap(src, 4096);
	munmap(dst, 8192);
}

/* readable reports whether fd polls readable within ms. */
static int readable(int fd, int ms)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	return poll(&pf, 1, ms) == 1 && pf.revents & POLLIN;
}

struct destroyer {
	struct ibv_cq *cq;
	volatile int done;
	int r;
};

static void *destroy_cq_thread(void *arg)
{
	struct destroyer *d = arg;
	d->r = ibv_destroy_cq(d->cq);
	d->done = 1;
	return NULL;
}

static void test_cq(void)
{
	NULL_ERR(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	NULL_ERR(ibv_create_cq(ctx, -1, NULL, NULL, 0), EINVAL);
	NULL_ERR(ibv_create_cq(ctx, dattr.max_cqe + 1, NULL, NULL, 0), EINVAL);
	NULL_ERR(ibv_create_cq(ctx, 4, NULL, NULL, ctx->num_comp_vectors), EINVAL);
	NULL_ERR(ibv_create_cq(ctx, 4, NULL, NULL, -1), EINVAL);
	struct ibv_cq *cq = OK(ibv_create_cq(ctx, 5, (void *)0x1234, NULL, 0));
	CHECK(cq->cqe >= 5 && cq->context == ctx && cq->cq_context == (void *)0x1234, "ibv_create_cq's fields: cqe %d",
	      cq->cqe);
	EQ_ERR(ibv_destroy_cq(cq), 0);

	/* Resize with completions waiting: below them EINVAL, above them
	 * they stay, in order. */
	int LW = IBV_ACCESS_LOCAL_WRITE;
	char *buf = page_alloc(4096);
	struct ibv_mr *mr = OK(ibv_reg_mr(pd, buf, 4096, LW | IBV_ACCESS_REMOTE_WRITE));
	cq = OK(ibv_create_cq(ctx, 16, NULL, NULL, 0));
	struct ibv_qp *a = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 16, 1));
	struct ibv_qp *b = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 16, 1));
	MUST(connect_pair(a, b, &gid0, LW | IBV_ACCESS_REMOTE_WRITE));
	for (int i = 0; i < 6; i++)
		MUST(post_write(a, 100 + i, buf, 8, mr->lkey, (uintptr_t)buf + 64, mr->rkey));
	usleep(300 * 1000); /* the six completions are in the CQ by now */
	EQ_ERR(ibv_resize_cq(cq, 5), EINVAL);
	EQ_ERR(ibv_resize_cq(cq, 2), EINVAL);
	EQ_ERR(ibv_resize_cq(cq, 0), EINVAL);
	EQ_ERR(ibv_resize_cq(cq, dattr.max_cqe + 1), EINVAL);
	EQ_ERR(ibv_resize_cq(cq, 100), 0);
	CHECK(cq->cqe >= 100, "cqe %d after ibv_resize_cq(100)", cq->cqe);
	struct ibv_wc wc[8];
	int n = poll_n(cq, wc, 6, 2000);
	CHECK(n == 6, "%d of 6 completions after the resize", n);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].wr_id == (uint64_t)(100 + i) && wc[i].status == IBV_WC_SUCCESS, "completion %d: wr_id %llu status %d",
		      i, (unsigned long long)wc[i].wr_id, wc[i].status);
	EQ_ERR(ibv_resize_cq(cq, 6), 0);
	MUST(post_write(a, 200, buf, 8, mr->lkey, (uintptr_t)buf + 64, mr->rkey));
	CHECK(poll_n(cq, wc, 1, 2000) == 1 && wc[0].wr_id == 200, "a completion after resizing down");

	/* A CQ that QPs use stays. */
	EQ_ERR(ibv_destroy_cq(cq), EBUSY);
	EQ_ERR(ibv_destroy_qp(a), 0);
	EQ_ERR(ibv_destroy_qp(b), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);

	/* Completion events: notify for any, for solicited only. */
	struct ibv_comp_channel *ch = OK(ibv_create_comp_channel(ctx));
	CHECK(ch->fd >= 0 && ch->context == ctx, "ibv_create_comp_channel's fields");
	struct ibv_cq *scq = OK(ibv_create_cq(ctx, 16, NULL, NULL, 0));
	struct ibv_cq *rcq = OK(ibv_create_cq(ctx, 16, (void *)0x77, ch, 0));
	CHECK(rcq->channel == ch, "cq->channel");
	EQ_ERR(ibv_destroy_comp_channel(ch), EBUSY);
	a = OK(make_qp(pd, IBV_QPT_RC, scq, scq, NULL, 16, 1));
	b = OK(make_qp(pd, IBV_QPT_RC, scq, rcq, NULL, 16, 1));
	MUST(connect_pair(a, b, &gid0, LW));
	/* O_NONBLOCK: no event is EAGAIN, and poll(2) says nothing. */
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on a channel's fd");
	struct ibv_cq *ecq;
	void *ectx;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == -1 && errno == EAGAIN, "ibv_get_cq_event without an event: errno %d",
	      errno);
	CHECK(!readable(ch->fd, 0), "a channel without events polls readable");

	for (int i = 0; i < 4; i++)
		MUST(post_recv1(b, 300 + i, buf + 512 * i, 512, mr->lkey));
	/* Not armed: no event. */
	MUST(post_send_op(a, 1, IBV_WR_SEND, buf, 8, mr->lkey, 0));
	CHECK(poll_n(scq, wc, 1, 2000) == 1, "the first SEND's completion");
	CHECK(!readable(ch->fd, 200), "an event from a CQ not armed");
	CHECK(poll_n(rcq, wc, 1, 2000) == 1 && wc[0].wr_id == 300, "the first receive");
	/* Armed for any. */
	EQ_ERR(ibv_req_notify_cq(rcq, 0), 0);
	MUST(post_send_op(a, 2, IBV_WR_SEND, buf, 8, mr->lkey, 0));
	CHECK(readable(ch->fd, 5000), "no event from a CQ armed for any completion");
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == rcq && ectx == (void *)0x77, "ibv_get_cq_event's CQ");
	CHECK(!readable(ch->fd, 0), "a second event from one arm");
	CHECK(poll_n(rcq, wc, 1, 2000) == 1 && wc[0].wr_id == 301, "the second receive");
	/* Armed for solicited completions: an unsolicited one gives none. */
	EQ_ERR(ibv_req_notify_cq(rcq, 1), 0);
	MUST(post_send_op(a, 3, IBV_WR_SEND, buf, 8, mr->lkey, 0));
	CHECK(poll_n(rcq, wc, 1, 2000) == 1 && wc[0].wr_id == 302, "the third receive");
	CHECK(!readable(ch->fd, 200), "an event for an unsolicited completion");
	MUST(post_send_op(a, 4, IBV_WR_SEND, buf, 8, mr->lkey, IBV_SEND_SOLICITED));
	CHECK(readable(ch->fd, 5000), "no event for a solicited completion");
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == rcq, "the solicited event's CQ");
	CHECK(poll_n(rcq, wc, 1, 2000) == 1 && wc[0].wr_id == 303, "the fourth receive");
	CHECK(poll_n(scq, wc, 3, 2000) == 3, "the SENDs' completions");
	/* ibv_destroy_cq waits for its events to be acked. */
	EQ_ERR(ibv_destroy_qp(a), 0);
	EQ_ERR(ibv_destroy_qp(b), 0);
	ibv_ack_cq_events(rcq, 1);
	struct destroyer d = {.cq = rcq};
	pthread_t th;
	pthread_create(&th, NULL, destroy_cq_thread, &d);
	usleep(200 * 1000);
	CHECK(!d.done, "ibv_destroy_cq returned with an event not acked");
	ibv_ack_cq_events(rcq, 1);
	pthread_join(th, NULL);
	CHECK(d.done && d.r == 0, "ibv_destroy_cq after the acks: %d", d.r);
	EQ_ERR(ibv_destroy_cq(scq), 0);
	EQ_ERR(ibv_destroy_comp_channel(ch), 0);
	EQ_ERR(ibv_dereg_mr(mr), 0);
	munmap(buf, 4096);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return (enum ibv_qp_state)-1;
	return a.qp_state;
}

static int to_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = {.qp_state = s};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

/* The state table of ibv_modify_qp, IBTA 10.3.1 and the kernel's
 * ib_modify_qp_is_ok, for one QP type: the attributes each transition
 * requires (leaving one out is EINVAL), those it allows, and those it
 * refuses (EINVAL). */
static void test_transitions(enum ibv_qp_type t, struct ibv_cq *cq)
{
	const char *tn = t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD";
	struct ibv_qp *qp = OK(make_qp(pd, t, cq, cq, NULL, 8, 1));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x22,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	int init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS);
	/* RESET to INIT. */
	for (int bit = 1; bit < 1 << 21; bit <<= 1)
		if (init & bit & ~IBV_QP_STATE)
			CHECK(ibv_modify_qp(qp, &a, init & ~bit) == EINVAL, "%s RESET to INIT without mask bit %#x", tn, bit);
	CHECK(ibv_modify_qp(qp, &a, init | IBV_QP_SQ_PSN) == EINVAL, "%s RESET to INIT with SQ_PSN", tn);
	CHECK(ibv_modify_qp(qp, &a, init | (t == IBV_QPT_UD ? IBV_QP_ACCESS_FLAGS : IBV_QP_QKEY)) == EINVAL,
	      "%s RESET to INIT with the other type's attribute", tn);
	CHECK(to_state(qp, IBV_QPS_RTR) == EINVAL && to_state(qp, IBV_QPS_RTS) == EINVAL &&
		      to_state(qp, IBV_QPS_SQD) == EINVAL,
	      "%s RESET to a state past INIT", tn);
	a.port_num = 2;
	CHECK(ibv_modify_qp(qp, &a, init) == EINVAL, "%s to INIT on port 2", tn);
	a.port_num = 1;
	a.pkey_index = 1;
	CHECK(ibv_modify_qp(qp, &a, init) == EINVAL, "%s to INIT with P_Key index 1", tn);
	a.pkey_index = 0;
	CHECK(ibv_modify_qp(qp, &a, init) == 0 && qp_state(qp) == IBV_QPS_INIT && qp->state == IBV_QPS_INIT,
	      "%s RESET to INIT", tn);
	/* INIT to INIT takes what RESET to INIT required, as options. */
	CHECK(ibv_modify_qp(qp, &a, init & ~IBV_QP_PORT) == 0, "%s INIT to INIT", tn);
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "%s INIT to INIT with nothing", tn);
	CHECK(to_state(qp, IBV_QPS_RTS) == EINVAL, "%s INIT to RTS", tn);
	/* INIT to RTR. */
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp->qp_num,
				.rq_psn = 5, .max_dest_rd_atomic = 2, .min_rnr_timer = 3, .qkey = 0x23};
	av_to(&r.ah_attr, &gid0);
	int rtr = IBV_QP_STATE;
	if (t == IBV_QPT_RC)
		rtr |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
		       IBV_QP_MIN_RNR_TIMER;
	if (t == IBV_QPT_UC)
		rtr |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	for (int bit = 1; bit < 1 << 21; bit <<= 1)
		if (rtr & bit & ~IBV_QP_STATE)
			CHECK(ibv_modify_qp(qp, &r, rtr & ~bit) == EINVAL, "%s INIT to RTR without mask bit %#x", tn, bit);
	CHECK(ibv_modify_qp(qp, &r, rtr | IBV_QP_SQ_PSN) == EINVAL, "%s INIT to RTR with SQ_PSN", tn);
	if (t == IBV_QPT_UC)
		CHECK(ibv_modify_qp(qp, &r, rtr | IBV_QP_MAX_DEST_RD_ATOMIC) == EINVAL, "UC INIT to RTR with RD atomics");
	if (t != IBV_QPT_UD) {
		r.ah_attr.is_global = 0; /* RoCE needs a GRH */
		CHECK(ibv_modify_qp(qp, &r, rtr) == EINVAL, "%s INIT to RTR without a GRH", tn);
		r.ah_attr.is_global = 1;
		r.path_mtu = (enum ibv_mtu)7;
		CHECK(ibv_modify_qp(qp, &r, rtr) == EINVAL, "%s INIT to RTR with path MTU 7", tn);
		r.path_mtu = IBV_MTU_1024;
		r.ah_attr.grh.sgid_index = 200;
		CHECK(ibv_modify_qp(qp, &r, rtr) == EINVAL, "%s INIT to RTR with SGID index 200", tn);
		r.ah_attr.grh.sgid_index = 0;
	} else {
		CHECK(ibv_modify_qp(qp, &r, rtr | IBV_QP_AV) == EINVAL, "UD INIT to RTR with an AV");
	}
	CHECK(ibv_modify_qp(qp, &r, rtr) == 0 && qp_state(qp) == IBV_QPS_RTR, "%s INIT to RTR", tn);
	/* RTR to RTS. */
	struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS, .sq_psn = 9, .timeout = 10, .retry_cnt = 5, .rnr_retry = 6,
				.max_rd_atomic = 3, .min_rnr_timer = 4, .qkey = 0x24};
	int rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (t == IBV_QPT_RC)
		rts |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	for (int bit = 1; bit < 1 << 21; bit <<= 1)
		if (rts & bit & ~IBV_QP_STATE)
			CHECK(ibv_modify_qp(qp, &s, rts & ~bit) == EINVAL, "%s RTR to RTS without mask bit %#x", tn, bit);
	CHECK(ibv_modify_qp(qp, &s, rts | IBV_QP_PATH_MTU) == EINVAL, "%s RTR to RTS with PATH_MTU", tn);
	if (t == IBV_QPT_RC) {
		s.retry_cnt = 8;
		CHECK(ibv_modify_qp(qp, &s, rts) == EINVAL, "RC RTR to RTS with retry count 8");
		s.retry_cnt = 5;
	}
	CHECK(ibv_modify_qp(qp, &s, rts) == 0 && qp_state(qp) == IBV_QPS_RTS, "%s RTR to RTS", tn);

	/* ibv_query_qp's values. */
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	memset(&q, 0x55, sizeof q);
	EQ_ERR(ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_CAP | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_SQ_PSN, &qi), 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.sq_psn == 9 && q.cap.max_send_wr >= 8 && q.cap.max_send_sge >= 1 &&
		      qi.qp_type == t && qi.send_cq == cq && qi.recv_cq == cq && qi.cap.max_send_wr == q.cap.max_send_wr,
	      "%s ibv_query_qp: state %d sq_psn %u type %d", tn, q.qp_state, q.sq_psn, qi.qp_type);
	if (t == IBV_QPT_RC)
		CHECK(q.timeout == 10 && q.retry_cnt == 5 && q.rnr_retry == 6 && q.max_rd_atomic == 3 &&
			      q.max_dest_rd_atomic == 2 && q.min_rnr_timer == 3 && q.rq_psn == 5,
		      "RC ibv_query_qp: timeout %d retry %d rnr %d rd %d dest rd %d min rnr %d rq_psn %u", q.timeout,
		      q.retry_cnt, q.rnr_retry, q.max_rd_atomic, q.max_dest_rd_atomic, q.min_rnr_timer, q.rq_psn);
	if (t != IBV_QPT_UD)
		CHECK(q.path_mtu == IBV_MTU_1024 && q.dest_qp_num == qp->qp_num && q.qp_access_flags == IBV_ACCESS_REMOTE_WRITE &&
			      q.ah_attr.is_global && !memcmp(&q.ah_attr.grh.dgid, &gid0, 16) && q.ah_attr.port_num == 1,
		      "%s ibv_query_qp: mtu %d dest %u access %#x", tn, q.path_mtu, q.dest_qp_num, q.qp_access_flags);
	else
		CHECK(q.qkey == 0x22, "UD ibv_query_qp: qkey %#x", q.qkey);

	/* RTS to RTS, to SQD and back, to ERR and RESET. */
	int opt = t == IBV_QPT_UD ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS;
	s.qkey = 0x25;
	CHECK(ibv_modify_qp(qp, &s, IBV_QP_STATE | opt) == 0, "%s RTS to RTS", tn);
	CHECK(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL, "%s RTS to RTS with SQ_PSN", tn);
	if (t == IBV_QPT_RC)
		CHECK(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER) == 0, "RC RTS to RTS, min RNR timer");
	s.cur_qp_state = IBV_QPS_INIT;
	CHECK(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_CUR_STATE) == EINVAL, "%s a current state that is not", tn);
	s.cur_qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0, "%s the current state as it is", tn);
	CHECK(to_state(qp, (enum ibv_qp_state)9) == EINVAL, "%s to state 9", tn);
	CHECK(to_state(qp, IBV_QPS_SQD) == 0, "%s RTS to SQD", tn);
	enum ibv_qp_state st = qp_state(qp);
	CHECK(st == IBV_QPS_SQD, "%s in SQD: %d", tn, st);
	CHECK(to_state(qp, IBV_QPS_RTS) == 0 && qp_state(qp) == IBV_QPS_RTS, "%s SQD to RTS", tn);
	CHECK(to_state(qp, IBV_QPS_RTR) == EINVAL, "%s RTS to RTR", tn);
	CHECK(to_state(qp, IBV_QPS_ERR) == 0 && qp_state(qp) == IBV_QPS_ERR, "%s RTS to ERR", tn);
	CHECK(to_state(qp, IBV_QPS_RTS) == EINVAL && to_state(qp, IBV_QPS_INIT) == EINVAL, "%s ERR to RTS or INIT", tn);
	CHECK(to_state(qp, IBV_QPS_RESET) == 0 && qp_state(qp) == IBV_QPS_RESET, "%s ERR to RESET", tn);
	/* The kernel's table has no RESET to ERR. */
	CHECK(to_state(qp, IBV_QPS_ERR) == EINVAL, "%s RESET to ERR", tn);
	CHECK(ibv_modify_qp(qp, &a, init) == 0 && to_state(qp, IBV_QPS_RESET) == 0, "%s INIT to RESET", tn);
	/* Mask bits past IBV_QP_DEST_QPN: the kernel's uverbs refuses
	 * them before the driver sees them. */
	CHECK(ibv_modify_qp(qp, &a, init | (1 << 28)) == EOPNOTSUPP, "%s an unknown mask bit", tn);
	EQ_ERR(ibv_destroy_qp(qp), 0);
}

static void test_qp(void)
{
	int LW = IBV_ACCESS_LOCAL_WRITE;
	struct ibv_cq *cq = OK(ibv_create_cq(ctx, 256, NULL, NULL, 0));
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	ia.cap.max_send_wr = dattr.max_qp_wr + 1;
	NULL_ERR(ibv_create_qp(pd, &ia), EINVAL);
	ia.cap.max_send_wr = 4;
	ia.cap.max_recv_wr = dattr.max_qp_wr + 1;
	NULL_ERR(ibv_create_qp(pd, &ia), EINVAL);
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = dattr.max_sge + 1;
	NULL_ERR(ibv_create_qp(pd, &ia), EINVAL);
	ia.cap.max_send_sge = 1;
	ia.cap.max_inline_data = 1 << 20;
	NULL_ERR(ibv_create_qp(pd, &ia), EINVAL);
	ia.cap.max_inline_data = 0;
	ia.qp_type = IBV_QPT_RAW_PACKET;
	NULL_ERR(ibv_create_qp(pd, &ia), EOPNOTSUPP);
	ia.qp_type = IBV_QPT_XRC_SEND;
	NULL_ERR(ibv_create_qp(pd, &ia), EOPNOTSUPP);
	ia.qp_type = IBV_QPT_RC;
	struct ibv_qp *qp = OK(ibv_create_qp(pd, &ia));
	CHECK(ia.cap.max_send_wr >= 4 && ia.cap.max_recv_wr >= 4 && qp->qp_num && qp->state == IBV_QPS_RESET &&
		      qp->qp_type == IBV_QPT_RC && qp->pd == pd && qp->send_cq == cq,
	      "ibv_create_qp's fields and caps");
	EQ_ERR(ibv_destroy_qp(qp), 0);

	test_transitions(IBV_QPT_RC, cq);
	test_transitions(IBV_QPT_UC, cq);
	test_transitions(IBV_QPT_UD, cq);

	/* Posting: before RTS, past the queue, too many SGEs, too much
	 * inline data; bad_wr names the request refused, and those before
	 * it are posted. */
	char *buf = page_alloc(8192);
	struct ibv_mr *mr = OK(ibv_reg_mr(pd, buf, 8192, LW | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
							     IBV_ACCESS_REMOTE_ATOMIC));
	struct ibv_qp *a = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 4, 2));
	struct ibv_qp *b = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 4, 2));
	struct ibv_sge sg[4] = {{(uintptr_t)buf, 8, mr->lkey}, {(uintptr_t)buf + 8, 8, mr->lkey},
				{(uintptr_t)buf + 16, 8, mr->lkey}, {(uintptr_t)buf + 24, 8, mr->lkey}};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	struct ibv_recv_wr rw = {.wr_id = 2, .sg_list = sg, .num_sge = 1}, *rbad = NULL;
	CHECK(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "a send in RESET");
	CHECK(ibv_post_recv(a, &rw, &rbad) == EINVAL && rbad == &rw, "a receive in RESET");
	MUST(qp_init(a, LW | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
	MUST(qp_init(b, LW | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
	bad = NULL;
	CHECK(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "a send in INIT");
	CHECK(ibv_post_recv(b, &rw, &rbad) == 0, "a receive in INIT");
	MUST(qp_rtr(a, b->qp_num, &gid0));
	MUST(qp_rtr(b, a->qp_num, &gid0));
	CHECK(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr, "a send in RTR");
	MUST(qp_rts(a, 14, 7));
	MUST(qp_rts(b, 14, 7));
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	MUST(ibv_query_qp(a, &qa, IBV_QP_CAP, &qia));
	int maxwr = (int)qa.cap.max_send_wr, maxsge = (int)qa.cap.max_send_sge, maxinl = (int)qa.cap.max_inline_data;
	/* The receive posted in INIT takes a SEND. */
	MUST(ibv_post_send(a, &wr, &bad));
	struct ibv_wc wc[64];
	CHECK(poll_n(cq, wc, 2, 5000) == 2, "a SEND to a receive posted in INIT");

	struct ibv_send_wr chain[64];
	for (int i = 0; i < 64; i++)
		chain[i] = (struct ibv_send_wr){.wr_id = 1000 + i, .sg_list = sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
						.send_flags = IBV_SEND_SIGNALED, .next = i < 63 ? &chain[i + 1] : NULL};
	for (int i = 0; i < 64; i++) {
		chain[i].wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		chain[i].wr.rdma.rkey = mr->rkey;
	}
	CHECK(maxwr < 64, "max_send_wr %d", maxwr);
	chain[maxwr].next = NULL;
	bad = NULL;
	int r = ibv_post_send(a, chain, &bad);
	CHECK(r == ENOMEM && bad == &chain[maxwr], "a chain past the send queue: %d, bad_wr %ld of %d", r,
	      bad ? (long)(bad - chain) : -1L, maxwr);
	CHECK(poll_n(cq, wc, maxwr, 5000) == maxwr, "the chain's completions before the full queue");
	CHECK(poll_n(cq, wc, 1, 200) == 0, "a completion of the request the full queue refused");
	/* Receives past the queue. */
	struct ibv_recv_wr rchain[64];
	MUST(ibv_query_qp(b, &qa, IBV_QP_CAP, &qia));
	int maxrwr = (int)qa.cap.max_recv_wr;
	for (int i = 0; i <= maxrwr; i++)
		rchain[i] = (struct ibv_recv_wr){.wr_id = 2000 + i, .sg_list = sg, .num_sge = 1,
						 .next = i < maxrwr ? &rchain[i + 1] : NULL};
	rbad = NULL;
	r = ibv_post_recv(b, rchain, &rbad);
	CHECK(r == ENOMEM && rbad == &rchain[maxrwr], "a chain past the receive queue: %d", r);
	/* Too many SGEs, second in a chain. */
	chain[0].next = &chain[1];
	chain[1].next = NULL;
	chain[1].num_sge = maxsge + 1;
	chain[1].sg_list = sg;
	CHECK(maxsge + 1 <= 4, "max_send_sge %d", maxsge);
	bad = NULL;
	CHECK(ibv_post_send(a, chain, &bad) == EINVAL && bad == &chain[1], "a send of too many SGEs");
	CHECK(poll_n(cq, wc, 1, 5000) == 1 && wc[0].wr_id == 1000, "the request before the one of too many SGEs");
	chain[1].num_sge = 1;
	/* Too much inline data. */
	chain[1].send_flags |= IBV_SEND_INLINE;
	sg[3].length = maxinl + 1;
	chain[1].sg_list = &sg[3];
	bad = NULL;
	CHECK(ibv_post_send(a, chain, &bad) == EINVAL && bad == &chain[1], "a send of too much inline data");
	CHECK(poll_n(cq, wc, 1, 5000) == 1 && wc[0].wr_id == 1000, "the request before the one of too much inline data");
	sg[3].length = 8;
	/* An opcode the QP type does not take, an unknown one. */
	struct ibv_send_wr one = wr;
	one.opcode = (enum ibv_wr_opcode)42;
	CHECK(ibv_post_send(a, &one, &bad) == EINVAL && bad == &one, "an unknown opcode");
	/* Receives of too many SGEs. */
	rw.num_sge = qa.cap.max_recv_sge + 1;
	r = ibv_post_recv(a, &rw, &rbad); /* b's queue is full: that is checked first, as rxe does */
	CHECK(r == EINVAL && rbad == &rw, "a receive of %d SGEs: %d", rw.num_sge, r);
	rw.num_sge = 1;

	/* RC's operations work: READ, both atomics, inline. */
	uint64_t *at = (uint64_t *)(buf + 4096);
	*at = 5;
	struct ibv_send_wr op = {.wr_id = 50, .sg_list = &sg[0], .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED};
	op.wr.atomic.remote_addr = (uintptr_t)at;
	op.wr.atomic.rkey = mr->rkey;
	op.wr.atomic.compare_add = 3;
	MUST(ibv_post_send(a, &op, &bad));
	CHECK(poll_n(cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_FETCH_ADD &&
		      *at == 8 && *(uint64_t *)buf == 5,
	      "FETCH_AND_ADD: status %d, %llu", wc[0].status, (unsigned long long)*at);
	op.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	op.wr.atomic.compare_add = 8;
	op.wr.atomic.swap = 77;
	MUST(ibv_post_send(a, &op, &bad));
	CHECK(poll_n(cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_COMP_SWAP &&
		      *at == 77,
	      "CMP_AND_SWP: status %d, %llu", wc[0].status, (unsigned long long)*at);
	op.wr.atomic.remote_addr = (uintptr_t)at + 4;
	CHECK(ibv_post_send(a, &op, &bad) == EINVAL && bad == &op, "an atomic at an address not 8-aligned");
	op.wr.atomic.remote_addr = (uintptr_t)at;
	sg[0].length = 4;
	CHECK(ibv_post_send(a, &op, &bad) == EINVAL, "an atomic into 4 bytes");
	sg[0].length = 8;
	memcpy(buf + 4096 + 64, "readme!", 8);
	op = (struct ibv_send_wr){.wr_id = 51, .sg_list = &sg[1], .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED};
	op.wr.rdma.remote_addr = (uintptr_t)buf + 4096 + 64;
	op.wr.rdma.rkey = mr->rkey;
	MUST(ibv_post_send(a, &op, &bad));
	CHECK(poll_n(cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RDMA_READ &&
		      !memcmp(buf + 8, "readme!", 8),
	      "RDMA READ: status %d", wc[0].status);
	char inl[16] = "inline!";
	struct ibv_sge isg = {.addr = (uintptr_t)inl, .length = 8, .lkey = 0};
	op = (struct ibv_send_wr){.wr_id = 52, .sg_list = &isg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	op.wr.rdma.remote_addr = (uintptr_t)buf + 4096 + 128;
	op.wr.rdma.rkey = mr->rkey;
	MUST(ibv_post_send(a, &op, &bad));
	memset(inl, 0, sizeof inl); /* the bytes were taken at the post */
	CHECK(poll_n(cq, wc, 1, 5000) == 1 && wc[0].status == IBV_WC_SUCCESS && !memcmp(buf + 4096 + 128, "inline!", 8),
	      "an inline WRITE from memory not registered: status %d", wc[0].status);
	EQ_ERR(ibv_destroy_qp(a), 0);
	EQ_ERR(ibv_destroy_qp(b), 0);

	/* UD: SEND only, and an address handle each. */
	struct ibv_qp *u = OK(make_qp(pd, IBV_QPT_UD, cq, cq, NULL, 8, 1));
	struct ibv_qp *v = OK(make_qp(pd, IBV_QPT_UD, cq, cq, NULL, 8, 1));
	MUST(connect_pair(u, v, &gid0, 0));
	struct ibv_ah_attr aa;
	av_to(&aa, &gid0);
	struct ibv_ah *ah = OK(ibv_create_ah(pd, &aa));
	struct ibv_send_wr us = {.wr_id = 60, .sg_list = &sg[0], .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	us.wr.ud.remote_qpn = v->qp_num;
	us.wr.ud.remote_qkey = 0x11111111;
	/* rxe's provider would dereference a NULL address handle; goroce
	 * refuses it. */
	CHECK(ibv_post_send(u, &us, &bad) == EINVAL && bad == &us, "a UD send without an address handle");
	us.wr.ud.ah = ah;
	us.opcode = IBV_WR_RDMA_WRITE;
	CHECK(ibv_post_send(u, &us, &bad) == EINVAL && bad == &us, "a WRITE on a UD QP");
	us.opcode = IBV_WR_SEND_WITH_IMM;
	us.imm_data = htobe32(0xabcd);
	struct ibv_sge usg = {.addr = (uintptr_t)buf + 1024, .length = 40 + 64, .lkey = mr->lkey};
	struct ibv_recv_wr ur = {.wr_id = 61, .sg_list = &usg, .num_sge = 1};
	MUST(ibv_post_recv(v, &ur, &rbad));
	memcpy(buf, "ud-send", 8);
	MUST(ibv_post_send(u, &us, &bad));
	int got = poll_n(cq, wc, 2, 5000), ok = 0;
	for (int i = 0; i < got; i++)
		if (wc[i].wr_id == 61 && wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len == 40 + 8 &&
		    wc[i].src_qp == u->qp_num && wc[i].wc_flags & IBV_WC_GRH && wc[i].wc_flags & IBV_WC_WITH_IMM &&
		    be32toh(wc[i].imm_data) == 0xabcd && !memcmp(buf + 1024 + 40, "ud-send", 8)) {
			ok = 1;
			struct ibv_ah *back = ibv_create_ah_from_wc(pd, &wc[i], (struct ibv_grh *)(buf + 1024), 1);
			CHECK(back, "ibv_create_ah_from_wc: %s", strerror(errno));
			if (back)
				EQ_ERR(ibv_destroy_ah(back), 0);
		}
	CHECK(got == 2 && ok, "a UD SEND with immediate: %d completions", got);
	EQ_ERR(ibv_destroy_qp(u), 0);
	EQ_ERR(ibv_destroy_qp(v), 0);

	/* AH. */
	aa.is_global = 0;
	NULL_ERR(ibv_create_ah(pd, &aa), EINVAL); /* RoCE needs a GRH */
	aa.is_global = 1;
	aa.grh.sgid_index = 200;
	NULL_ERR(ibv_create_ah(pd, &aa), EINVAL);
	aa.grh.sgid_index = 0;
	aa.port_num = 2;
	NULL_ERR(ibv_create_ah(pd, &aa), EINVAL);
	EQ_ERR(ibv_destroy_ah(ah), 0);

	/* UC: WRITE and SEND, no READ. */
	struct pair p = make_pair(IBV_QPT_UC, 8, LW | IBV_ACCESS_REMOTE_WRITE);
	memcpy(buf, "uc-data", 8);
	CHECK(write_status(&p, buf, 8, mr->lkey, (uintptr_t)buf + 4096 + 256, mr->rkey) == IBV_WC_SUCCESS,
	      "a UC WRITE's completion");
	/* UC completes a WRITE when it leaves: the bytes land a moment
	 * later. */
	for (double end = now_ms() + 2000; memcmp(buf + 4096 + 256, "uc-data", 8) && now_ms() < end;)
		usleep(100);
	CHECK(!memcmp(buf + 4096 + 256, "uc-data", 8), "a UC WRITE's bytes");
	op.opcode = IBV_WR_RDMA_READ;
	op.send_flags = IBV_SEND_SIGNALED;
	op.sg_list = sg;
	CHECK(ibv_post_send(p.a, &op, &bad) == EINVAL && bad == &op, "a READ on a UC QP");
	free_pair(&p);

	EQ_ERR(ibv_dereg_mr(mr), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);
	munmap(buf, 8192);
}

static struct ibv_async_event get_event(int ms)
{
	struct ibv_async_event e = {.event_type = (enum ibv_event_type)-1};
	if (readable(ctx->async_fd, ms) && ibv_get_async_event(ctx, &e))
		e.event_type = (enum ibv_event_type)-2;
	return e;
}

static void test_srq_and_events(void)
{
	int LW = IBV_ACCESS_LOCAL_WRITE;
	struct ibv_srq_init_attr si = {.attr = {.max_wr = dattr.max_srq_wr + 1, .max_sge = 1}};
	NULL_ERR(ibv_create_srq(pd, &si), EINVAL);
	si.attr.max_wr = 16;
	si.attr.max_sge = dattr.max_srq_sge + 1;
	NULL_ERR(ibv_create_srq(pd, &si), EINVAL);
	si.attr.max_wr = 0;
	si.attr.max_sge = 1;
	NULL_ERR(ibv_create_srq(pd, &si), EINVAL);
	si.attr.max_wr = 16;
	si.srq_context = (void *)0x99;
	struct ibv_srq *srq = OK(ibv_create_srq(pd, &si));
	CHECK(si.attr.max_wr >= 16 && srq->srq_context == (void *)0x99 && srq->pd == pd, "ibv_create_srq's fields");
	struct ibv_srq_attr sa;
	EQ_ERR(ibv_query_srq(srq, &sa), 0);
	CHECK(sa.max_wr >= 16 && sa.max_sge >= 1 && sa.srq_limit == 0, "ibv_query_srq: %u %u %u", sa.max_wr, sa.max_sge,
	      sa.srq_limit);
	/* No resizing: goroce does not claim IBV_DEVICE_SRQ_RESIZE (rxe
	 * does, and resizes). */
	CHECK(!(dattr.device_cap_flags & IBV_DEVICE_SRQ_RESIZE), "IBV_DEVICE_SRQ_RESIZE claimed");
	sa.max_wr = 32;
	EQ_ERR(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR), EINVAL);
	sa.srq_limit = sa.max_wr + 100;
	EQ_ERR(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), EINVAL);
	sa.srq_limit = 4;
	EQ_ERR(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0);
	EQ_ERR(ibv_query_srq(srq, &sa), 0);
	CHECK(sa.srq_limit == 4, "the limit after ibv_modify_srq: %u", sa.srq_limit);

	char *buf = page_alloc(8192);
	struct ibv_mr *mr = OK(ibv_reg_mr(pd, buf, 8192, LW));
	struct ibv_sge sg[3] = {{(uintptr_t)buf, 64, mr->lkey}, {(uintptr_t)buf + 64, 64, mr->lkey},
				{(uintptr_t)buf + 128, 64, mr->lkey}};
	struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = sg, .num_sge = (int)sa.max_sge + 1}, *rbad = NULL;
	CHECK(ibv_post_srq_recv(srq, &rw, &rbad) == EINVAL && rbad == &rw, "an SRQ receive of too many SGEs");
	rw.num_sge = 1;
	struct ibv_recv_wr rchain[64];
	int maxwr = (int)sa.max_wr;
	CHECK(maxwr < 64, "SRQ max_wr %d", maxwr);
	for (int i = 0; i <= maxwr; i++)
		rchain[i] = (struct ibv_recv_wr){.wr_id = 100 + i, .sg_list = &sg[0], .num_sge = 1,
						 .next = i < maxwr ? &rchain[i + 1] : NULL};
	rbad = NULL;
	int r = ibv_post_srq_recv(srq, rchain, &rbad);
	CHECK(r == ENOMEM && rbad == &rchain[maxwr], "a chain past the SRQ: %d", r);

	/* The async event fd: O_NONBLOCK and poll(2) as the kernel's. */
	int fl = fcntl(ctx->async_fd, F_GETFL);
	CHECK(fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on async_fd");
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "ibv_get_async_event without one: errno %d", errno);
	CHECK(!readable(ctx->async_fd, 0), "async_fd readable without an event");

	/* The SRQ holds maxwr receives; sending until fewer than the limit
	 * are left raises SRQ_LIMIT_REACHED, once. */
	struct ibv_cq *cq = OK(ibv_create_cq(ctx, 256, NULL, NULL, 0));
	struct ibv_qp *a = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 16, 1));
	struct ibv_qp *b = OK(make_qp(pd, IBV_QPT_RC, cq, cq, srq, 16, 1));
	CHECK(b->srq == srq, "qp->srq");
	MUST(connect_pair(a, b, &gid0, LW));
	CHECK(ibv_post_recv(b, &rw, &rbad) == EINVAL, "a receive on a QP of an SRQ");
	EQ_ERR(ibv_destroy_srq(srq), EBUSY);
	int sent = 0;
	struct ibv_wc wc[64];
	while (sent < maxwr - 3) {
		MUST(post_send_op(a, 500 + sent, IBV_WR_SEND, buf + 4096, 8, mr->lkey, 0));
		sent++;
	}
	CHECK(poll_n(cq, wc, 2 * sent, 5000) == 2 * sent, "the SENDs to the SRQ");
	ev = get_event(5000);
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "the SRQ limit event: type %d (%s)", ev.event_type, ibv_event_type_str(ev.event_type));
	if (ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED)
		ibv_ack_async_event(&ev);
	EQ_ERR(ibv_query_srq(srq, &sa), 0);
	CHECK(sa.srq_limit == 0, "the limit after its event: %u", sa.srq_limit);
	MUST(post_send_op(a, 600, IBV_WR_SEND, buf + 4096, 8, mr->lkey, 0));
	CHECK(poll_n(cq, wc, 2, 5000) == 2, "a SEND past the limit");
	CHECK(get_event(200).event_type == (enum ibv_event_type)-1, "a second limit event");

	/* A QP of an SRQ in ERR: LAST_WQE_REACHED. */
	EQ_ERR(to_state(b, IBV_QPS_ERR), 0);
	ev = get_event(5000);
	CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == b, "LAST_WQE_REACHED: type %d (%s)",
	      ev.event_type, ibv_event_type_str(ev.event_type));
	if ((int)ev.event_type >= 0)
		ibv_ack_async_event(&ev);
	CHECK(!readable(ctx->async_fd, 0), "async_fd readable after its events were read");
	CHECK(fcntl(ctx->async_fd, F_SETFL, fl) == 0, "async_fd blocking again");
	EQ_ERR(ibv_destroy_qp(a), 0);
	EQ_ERR(ibv_destroy_qp(b), 0);
	EQ_ERR(ibv_destroy_srq(srq), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);
	EQ_ERR(ibv_dereg_mr(mr), 0);
	munmap(buf, 8192);
}

static void test_ex(void)
{
	int LW = IBV_ACCESS_LOCAL_WRITE, RW = IBV_ACCESS_REMOTE_WRITE;
	/* The extended CQ. */
	struct ibv_cq_init_attr_ex ca = {.cqe = 64,
					 .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
						     IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
						     IBV_WC_EX_WITH_DLID_PATH_BITS};
	struct ibv_cq_init_attr_ex bad = ca;
	bad.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	NULL_ERR(ibv_create_cq_ex(ctx, &bad), EOPNOTSUPP); /* no clock in the completions */
	bad = ca;
	bad.comp_mask = 1 << 10;
	NULL_ERR(ibv_create_cq_ex(ctx, &bad), EINVAL);
	bad = ca;
	bad.cqe = 0;
	NULL_ERR(ibv_create_cq_ex(ctx, &bad), EINVAL);
	struct ibv_cq_ex *cqx = OK(ibv_create_cq_ex(ctx, &ca));
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
	struct ibv_poll_cq_attr pa = {0};
	EQ_ERR(ibv_start_poll(cqx, &pa), ENOENT);

	/* The extended QP. */
	struct ibv_qp_init_attr_ex qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2,
						 .max_inline_data = 32},
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
					 .pd = pd,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
							   IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ};
	struct ibv_qp_init_attr_ex qbad = qa;
	qbad.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	qbad.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	NULL_ERR(ibv_create_qp_ex(ctx, &qbad), EOPNOTSUPP); /* rxe takes no create flags */
	struct ibv_qp *qp = OK(ibv_create_qp_ex(ctx, &qa));
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
	CHECK(qx != NULL, "ibv_qp_to_qp_ex of a QP made with send_ops_flags");
	struct ibv_qp *plain = OK(make_qp(pd, IBV_QPT_RC, cq, cq, NULL, 8, 2));
	CHECK(ibv_qp_to_qp_ex(plain) == NULL, "ibv_qp_to_qp_ex of a QP made without send_ops_flags");
	MUST(connect_pair(qp, plain, &gid0, LW | RW));
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	MUST(ibv_query_qp(qp, &at, IBV_QP_CAP, &ia));
	int maxwr = (int)at.cap.max_send_wr, maxsge = (int)at.cap.max_send_sge, maxinl = (int)at.cap.max_inline_data;

	char *buf = page_alloc(8192);
	struct ibv_mr *mr = OK(ibv_reg_mr(pd, buf, 8192, LW | RW));
	MUST(post_recv1(plain, 70, buf + 4096, 64, mr->lkey));
	memcpy(buf, "builder", 8);
	ibv_wr_start(qx);
	qx->wr_id = 71;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 2048);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	qx->wr_id = 72;
	ibv_wr_send_imm(qx, htobe32(0x1234));
	ibv_wr_set_inline_data(qx, "inl-snd", 8);
	EQ_ERR(ibv_wr_complete(qx), 0);
	/* Three completions through ibv_start_poll and friends. */
	int got = 0, seen = 0;
	for (double end = now_ms() + 5000; got < 3 && now_ms() < end;) {
		int r = ibv_start_poll(cqx, &pa);
		if (r == ENOENT) {
			usleep(100);
			continue;
		}
		CHECK(r == 0, "ibv_start_poll = %d", r);
		if (r)
			break;
		do {
			got++;
			uint64_t id = cqx->wr_id;
			enum ibv_wc_opcode op = ibv_wc_read_opcode(cqx);
			if (cqx->status != IBV_WC_SUCCESS)
				seen |= 64;
			else if (id == 71 && op == IBV_WC_RDMA_WRITE)
				seen |= 1;
			else if (id == 72 && op == IBV_WC_SEND)
				seen |= 2;
			else if (id == 70 && op == IBV_WC_RECV && ibv_wc_read_byte_len(cqx) == 8 &&
				 be32toh(ibv_wc_read_imm_data(cqx)) == 0x1234 && ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_IMM &&
				 ibv_wc_read_qp_num(cqx) == plain->qp_num && !memcmp(buf + 4096, "inl-snd", 8))
				seen |= 4;
			else
				seen |= 128;
		} while (got < 3 && (r = ibv_next_poll(cqx)) == 0);
		ibv_end_poll(cqx);
	}
	CHECK(got == 3 && seen == 7 && !memcmp(buf + 2048, "builder", 8), "the builders' completions: %d, seen %#x", got,
	      seen);

	/* Errors come back from ibv_wr_complete, and nothing is posted. */
	struct ibv_sge sg[8];
	for (int i = 0; i < 8; i++)
		sg[i] = (struct ibv_sge){(uintptr_t)buf + 8 * i, 8, mr->lkey};
	CHECK(maxsge < 8, "max_send_sge %d", maxsge);
	ibv_wr_start(qx);
	qx->wr_id = 80;
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	qx->wr_id = 81;
	ibv_wr_send(qx);
	ibv_wr_set_sge_list(qx, maxsge + 1, sg);
	EQ_ERR(ibv_wr_complete(qx), EINVAL);
	char big[256] = {0};
	CHECK(maxinl < (int)sizeof big, "max_inline_data %d", maxinl);
	ibv_wr_start(qx);
	qx->wr_id = 82;
	ibv_wr_send(qx);
	ibv_wr_set_inline_data(qx, big, maxinl + 1);
	EQ_ERR(ibv_wr_complete(qx), EINVAL);
	ibv_wr_start(qx);
	for (int i = 0; i <= maxwr; i++) {
		qx->wr_id = 90 + i;
		ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 2048);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	}
	EQ_ERR(ibv_wr_complete(qx), ENOMEM);
	ibv_wr_start(qx);
	qx->wr_id = 83;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 2048);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	ibv_wr_abort(qx);
	struct ibv_wc wc[4];
	CHECK(poll_n(cq, wc, 1, 300) == 0, "a completion of a request refused or aborted");
	/* The queue is whole again: a batch of max_send_wr goes. */
	ibv_wr_start(qx);
	for (int i = 0; i < maxwr; i++) {
		qx->wr_id = 100 + i;
		ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)buf + 2048);
		ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	}
	EQ_ERR(ibv_wr_complete(qx), 0);
	struct ibv_wc many[64];
	CHECK(maxwr <= 64 && poll_n(cq, many, maxwr, 5000) == maxwr && many[0].wr_id == 100 &&
		      many[maxwr - 1].wr_id == (uint64_t)(100 + maxwr - 1),
	      "a full batch of builders");
	/* Before RTS. */
	MUST(to_state(qp, IBV_QPS_ERR));
	MUST(to_state(qp, IBV_QPS_RESET));
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, mr->lkey, (uintptr_t)buf, 8);
	EQ_ERR(ibv_wr_complete(qx), EINVAL);
	EQ_ERR(ibv_destroy_qp(qp), 0);
	EQ_ERR(ibv_destroy_qp(plain), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);
	EQ_ERR(ibv_dereg_mr(mr), 0);
	munmap(buf, 8192);
}

/* What goroce does not have fails with EOPNOTSUPP (or ENOSYS), never a
 * crash. */
static void test_unsupported(void)
{
	struct ibv_xrcd_init_attr xa = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					.oflags = O_CREAT};
	NULL_ERR(ibv_open_xrcd(ctx, &xa), EOPNOTSUPP);
	struct ibv_td_init_attr ta = {0};
	NULL_ERR(ibv_alloc_td(ctx, &ta), EOPNOTSUPP);
	struct ibv_parent_domain_init_attr pda = {.pd = pd};
	NULL_ERR(ibv_alloc_parent_domain(ctx, &pda), EOPNOTSUPP);
	struct ibv_alloc_dm_attr dma = {.length = 4096};
	NULL_ERR(ibv_alloc_dm(ctx, &dma), EOPNOTSUPP);
	struct ibv_counters_init_attr cia = {0};
	NULL_ERR(ibv_create_counters(ctx, &cia), EOPNOTSUPP);
	struct ibv_wq_init_attr wa = {.wq_type = IBV_WQT_RQ, .max_wr = 4, .max_sge = 1, .pd = pd};
	struct ibv_cq *cq = OK(ibv_create_cq(ctx, 4, NULL, NULL, 0));
	wa.cq = cq;
	NULL_ERR(ibv_create_wq(ctx, &wa), EOPNOTSUPP);
	struct ibv_rwq_ind_table_init_attr ria = {0};
	NULL_ERR(ibv_create_rwq_ind_table(ctx, &ria), EOPNOTSUPP);
	struct ibv_qp_open_attr oa = {.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_TYPE, .qp_num = 1,
				      .qp_type = IBV_QPT_XRC_RECV};
	NULL_ERR(ibv_open_qp(ctx, &oa), EOPNOTSUPP);
	NULL_ERR(ibv_alloc_null_mr(pd), EOPNOTSUPP);
	struct ibv_values_ex v = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
	EQ_ERR(ibv_query_rt_values_ex(ctx, &v), EOPNOTSUPP);
	char b[64];
	struct ibv_sge sg = {(uintptr_t)b, 64, 0};
	EQ_ERR(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1), EOPNOTSUPP);
	struct ibv_modify_cq_attr mca = {.attr_mask = IBV_CQ_ATTR_MODERATE, .moderate = {1, 1}};
	EQ_ERR(ibv_modify_cq(cq, &mca), EOPNOTSUPP);
	struct ibv_qp *qp = OK(make_qp(pd, IBV_QPT_UD, cq, cq, NULL, 4, 1));
	struct ibv_flow_attr fa = {.size = sizeof fa, .port = 1};
	NULL_ERR(ibv_create_flow(qp, &fa), EOPNOTSUPP);
	struct ibv_qp_rate_limit_attr rla = {.rate_limit = 1000};
	EQ_ERR(ibv_modify_qp_rate_limit(qp, &rla), EOPNOTSUPP);
	struct ibv_ece ece;
	EQ_ERR(ibv_query_ece(qp, &ece), EOPNOTSUPP);
	EQ_ERR(ibv_set_ece(qp, &ece), EOPNOTSUPP);
	/* Multicast (testdata/mcast.c has the rest): a group of the device's IP version attaches
	 * and detaches, a second detach is EINVAL; an IPv6 group on this IPv4 device is EINVAL, as
	 * goroce cannot join it on its link (rxe attaches it, and nothing comes). */
	union ibv_gid mg = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 239, [13] = 255, [14] = 46, [15] = 1}};
	EQ_ERR(ibv_attach_mcast(qp, &mg, 0), 0);
	EQ_ERR(ibv_detach_mcast(qp, &mg, 0), 0);
	EQ_ERR(ibv_detach_mcast(qp, &mg, 0), EINVAL);
	union ibv_gid mg6 = {.raw = {0xff, 0x15, [14] = 0x46, [15] = 1}};
	EQ_ERR(ibv_attach_mcast(qp, &mg6, 0), EINVAL);
	struct ibv_srq_init_attr_ex sx = {.attr = {.max_wr = 4, .max_sge = 1},
					  .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD,
					  .srq_type = IBV_SRQT_XRC,
					  .pd = pd};
	NULL_ERR(ibv_create_srq_ex(ctx, &sx), EOPNOTSUPP);
	sx.srq_type = IBV_SRQT_BASIC;
	struct ibv_srq *srq = OK(ibv_create_srq_ex(ctx, &sx));
	uint32_t num;
	EQ_ERR(ibv_get_srq_num(srq, &num), EOPNOTSUPP);
	EQ_ERR(ibv_destroy_srq(srq), 0);
	NULL_ERR(ibv_import_device(ctx->cmd_fd), EOPNOTSUPP);
	NULL_ERR(ibv_import_pd(ctx, 1), EOPNOTSUPP);
	NULL_ERR(ibv_import_mr(pd, 1), EOPNOTSUPP);
	NULL_ERR(ibv_import_dm(ctx, 1), EOPNOTSUPP);
	CHECK(ibv_fork_init() == 0 && ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, "fork: not needed");
	EQ_ERR(ibv_destroy_qp(qp), 0);
	EQ_ERR(ibv_destroy_cq(cq), 0);
}

/* The public functions of libibverbs, each named in syms.c (which the
 * Go test writes): the program's references to them, as the dynamic
 * linker resolved them. Weak, for a build without syms.c. */
__attribute__((weak)) void *const gr_syms[1];
__attribute__((weak)) const char *const gr_names[1];
__attribute__((weak)) const int gr_nsyms;

/* test_symbols checks that every public function of libibverbs the
 * program references resolves to libgoroce (the preload), and so do the
 * context's operations: no call reaches a real libibverbs. */
static void test_symbols(void)
{
	for (int i = 0; i < gr_nsyms; i++) {
		Dl_info di;
		int ok = dladdr(gr_syms[i], &di) && di.dli_fname;
		CHECK(ok && strstr(di.dli_fname, "libgoroce"), "%s resolves to %s", gr_names[i], ok ? di.dli_fname : "nothing");
	}
	void *ops[] = {ctx->ops.poll_cq,  ctx->ops.req_notify_cq, ctx->ops.post_send, ctx->ops.post_recv,
		       ctx->ops.post_srq_recv, ctx->ops.alloc_mw, ctx->ops.bind_mw, ctx->ops.dealloc_mw};
	for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		Dl_info di;
		CHECK(ops[i] && dladdr(ops[i], &di) && strstr(di.dli_fname, "libgoroce"), "context op %zu", i);
	}
}

/* strings prints what the pure helpers return, for comparison with the
 * real libibverbs'. */
static int strings(void)
{
	for (int i = -1; i < 30; i++)
		printf("wc_status %d %s\n", i, ibv_wc_status_str((enum ibv_wc_status)i));
	for (int i = -1; i < 24; i++)
		printf("event %d %s\n", i, ibv_event_type_str((enum ibv_event_type)i));
	for (int i = -2; i < 9; i++)
		printf("node %d %s\n", i, ibv_node_type_str((enum ibv_node_type)i));
	for (int i = -1; i < 8; i++)
		printf("port %d %s\n", i, ibv_port_state_str((enum ibv_port_state)i));
	for (int i = -1; i < 26; i++)
		printf("rate %d mult %d mbps %d\n", i, ibv_rate_to_mult((enum ibv_rate)i), ibv_rate_to_mbps((enum ibv_rate)i));
	int mults[] = {0, 1, 2, 4, 5, 8, 10, 11, 12, 16, 20, 22, 24, 32, 40, 45, 48, 67, 80, 120, 160, 240, 320, 480, 3};
	for (size_t i = 0; i < sizeof mults / sizeof mults[0]; i++)
		printf("mult_to_rate %d %d\n", mults[i], mult_to_ibv_rate(mults[i]));
	int mbps[] = {0, 2500, 5000, 10000, 14062, 20000, 25781, 28125, 30000, 40000, 53125, 56250, 60000, 80000, 103125,
		      112500, 120000, 168750, 206250, 309375, 425000, 637500, 850000, 1275000, 1};
	for (size_t i = 0; i < sizeof mbps / sizeof mbps[0]; i++)
		printf("mbps_to_rate %d %d\n", mbps[i], mbps_to_ibv_rate(mbps[i]));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: verbs DEVICE | verbs --strings\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "--strings"))
		return strings();
	ctx = open_named(argv[1]);
	pd = OK(ibv_alloc_pd(ctx));
	test_device();
	test_pd();
	test_mr();
	test_mw();
	test_cq();
	test_qp();
	test_srq_and_events();
	test_ex();
	test_unsupported();
	test_symbols();
	EQ_ERR(ibv_dealloc_pd(pd), 0);
	EQ_ERR(ibv_close_device(ctx), 0);
	return report("verbs");
}
