/*
 * Sharing registered memory with the device.
 *
 * The device must read and write a region's bytes where the program has
 * them, as a NIC does by DMA. The process keeps one file (a memfd) whose
 * offset is the virtual address; registering a region maps its pages from
 * that file at their own address (MAP_FIXED), after copying what they
 * held into the file, and the device maps the same file range. The
 * program sees the same bytes at the same addresses as before; from then
 * on the device sees them too. When the last region on a page goes, the
 * page is mapped private again (its bytes copied back) and dropped from
 * the file.
 *
 * The pages are replaced while the program runs. The copy and the remap
 * run on a stack of this library's own with every signal blocked, so that
 * neither the caller's stack (a program may register memory on its stack)
 * nor a signal handler writes to a page between its copy and its remap. A
 * write by another thread to a page being replaced, in the microseconds
 * between the two, would be lost: programs register memory before they use
 * it, but neighbours on the same page are the program's business.
 *
 * fork: a child gets private copies of every shared page at once (the
 * kernel's copy-on-fork for pinned pages, since Linux 5.13, gives a child
 * copies too), and closes the file: it never writes the parent's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <ucontext.h>
#include <unistd.h>

#include "goroce.h"

#define PAGE 4096UL

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static int memfd = -1;
static ino_t mem_ino;

/* A segment: a page range mapped from the file, and how many regions
 * hold it. Sorted, never overlapping. */
struct seg {
	uintptr_t start, end;
	uint32_t refs;
};
static struct seg *segs;
static size_t nsegs, capsegs;

int gr_mem_fd(void)
{
	pthread_mutex_lock(&mem_lock);
	if (memfd < 0) {
		int fd = memfd_create("goroce-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		struct stat st;
		if (fd >= 0 &&
		    (ftruncate(fd, (off_t)GOROCE_MEM_FILE_SIZE) ||
		     fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(fd, &st))) {
			int e = errno;
			close(fd);
			errno = e;
			fd = -1;
		}
		if (fd >= 0) {
			memfd = fd;
			mem_ino = st.st_ino;
		}
	}
	int fd = memfd;
	pthread_mutex_unlock(&mem_lock);
	return fd;
}

/* The mappings of the range, from /proc/self/maps. */
struct vma {
	uintptr_t start, end;
	int prot;
	int shared;
	int ours; /* mapped from the file at offset == address */
};

static char *read_maps(void)
{
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, len = 0;
	char *b = malloc(cap);
	for (;;) {
		if (!b)
			break;
		if (len + 4096 > cap) {
			char *nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				b = NULL;
				break;
			}
			b = nb;
			cap *= 2;
		}
		ssize_t n = read(fd, b + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += n;
	}
	close(fd);
	if (b)
		b[len] = 0;
	return b;
}

/* vmas fills v with the mappings that cover [a, b) and reports how many,
 * or -1 when some page of it is not mapped (or there are more than max). */
static int vmas(uintptr_t a, uintptr_t b, struct vma *v, int max)
{
	char *maps = read_maps();
	if (!maps)
		return -1;
	int n = 0;
	uintptr_t at = a;
	for (char *line = maps; *line && at < b;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		uintptr_t s, e;
		char perms[8] = "";
		unsigned long long off, ino;
		unsigned maj, min;
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %llu", &s, &e, perms, &off, &maj, &min, &ino) ==
			    7 &&
		    e > at && s < b) {
			if (s > at || n == max) {
				n = -1;
				break;
			}
			struct vma *x = &v[n++];
			x->start = at;
			x->end = e < b ? e : b;
			x->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
				  (perms[2] == 'x' ? PROT_EXEC : 0);
			x->shared = perms[3] == 's';
			x->ours = memfd >= 0 && (ino_t)ino == mem_ino && off == s;
			at = x->end;
		}
		line = nl ? nl + 1 : line + strlen(line);
	}
	free(maps);
	return n >= 0 && at >= b ? n : -1;
}

/* What runs on the library's own stack. */
static struct {
	int op; /* 1: share, 2: make private */
	uintptr_t start, end;
	int prot;
	int err;
} job;
static ucontext_t job_caller, job_ctx;
static void *job_stack;
#define JOB_STACK (256 * 1024)

static int zero_page(const void *p)
{
	const uint64_t *w = p;
	for (size_t i = 0; i < PAGE / 8; i++)
		if (w[i])
			return 0;
	return 1;
}

/* copy_pages copies the pages of [a, a+n) from src to dst, skipping
 * those of zeros (dst starts as zeros: a new mapping). */
static void copy_pages(uint8_t *dst, const uint8_t *src, size_t n)
{
	for (size_t o = 0; o < n; o += PAGE)
		if (!zero_page(src + o))
			memcpy(dst + o, src + o, PAGE);
}

#define CHUNK (1UL << 20)

static void run_job(void)
{
	job.err = 0;
	for (uintptr_t a = job.start; a < job.end && !job.err; a += CHUNK) {
		size_t n = job.end - a < CHUNK ? job.end - a : CHUNK;
		if (job.op == 1) {
			uint8_t *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, (off_t)a);
			if (tmp == MAP_FAILED) {
				job.err = errno;
				break;
			}
			copy_pages(tmp, (const uint8_t *)a, n);
			munmap(tmp, n);
			if (mmap((void *)a, n, job.prot, MAP_SHARED | MAP_FIXED, memfd, (off_t)a) == MAP_FAILED)
				job.err = errno; /* the old mapping is still there, unchanged */
		} else {
			uint8_t *tmp = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (tmp == MAP_FAILED) {
				job.err = errno;
				break;
			}
			copy_pages(tmp, (const uint8_t *)a, n);
			if (job.prot != (PROT_READ | PROT_WRITE))
				mprotect(tmp, n, job.prot);
			if (mremap(tmp, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)a) == MAP_FAILED) {
				job.err = errno;
				munmap(tmp, n);
			}
		}
	}
}

static void job_entry(void) { run_job(); }

/* on_own_stack runs job with every signal blocked, on the library's stack;
 * the caller holds mem_lock. */
static int on_own_stack(int op, uintptr_t start, uintptr_t end, int prot)
{
	if (!job_stack) {
		job_stack = mmap(NULL, JOB_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (job_stack == MAP_FAILED) {
			job_stack = NULL;
			return ENOMEM;
		}
	}
	job.op = op;
	job.start = start;
	job.end = end;
	job.prot = prot;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	getcontext(&job_ctx);
	job_ctx.uc_stack.ss_sp = job_stack;
	job_ctx.uc_stack.ss_size = JOB_STACK;
	job_ctx.uc_link = &job_caller;
	makecontext(&job_ctx, job_entry, 0);
	swapcontext(&job_caller, &job_ctx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return job.err;
}

/* Segments. */

static int seg_insert(size_t i, struct seg s)
{
	if (nsegs == capsegs) {
		size_t c = capsegs ? 2 * capsegs : 64;
		struct seg *n = realloc(segs, c * sizeof *n);
		if (!n)
			return ENOMEM;
		segs = n;
		capsegs = c;
	}
	memmove(&segs[i + 1], &segs[i], (nsegs - i) * sizeof *segs);
	segs[i] = s;
	nsegs++;
	return 0;
}

static void seg_remove(size_t i)
{
	memmove(&segs[i], &segs[i + 1], (nsegs - i - 1) * sizeof *segs);
	nsegs--;
}

/* seg_split makes x a boundary between segments. */
static int seg_split(uintptr_t x)
{
	for (size_t i = 0; i < nsegs; i++)
		if (segs[i].start < x && x < segs[i].end) {
			struct seg hi = {x, segs[i].end, segs[i].refs};
			segs[i].end = x;
			return seg_insert(i + 1, hi);
		}
	return 0;
}

/* share maps [a, b), a gap between segments, from the file; v are its
 * mappings. */
static int share_gap(uintptr_t a, uintptr_t b, const struct vma *v, int nv, int writable)
{
	for (int i = 0; i < nv; i++) {
		uintptr_t s = v[i].start > a ? v[i].start : a, e = v[i].end < b ? v[i].end : b;
		if (s >= e)
			continue;
		if (!(v[i].prot & PROT_READ) || (writable && !(v[i].prot & PROT_WRITE)))
			return EFAULT; /* as the kernel refuses to pin such pages */
		if (v[i].shared && !v[i].ours)
			return EOPNOTSUPP; /* a shared file's pages: they cannot move to the file */
	}
	for (int i = 0; i < nv; i++) {
		uintptr_t s = v[i].start > a ? v[i].start : a, e = v[i].end < b ? v[i].end : b;
		if (s >= e || v[i].ours)
			continue;
		int r = on_own_stack(1, s, e, v[i].prot);
		if (r) {
			/* Give back what this gap shared so far. */
			for (int j = 0; j < i; j++) {
				uintptr_t s2 = v[j].start > a ? v[j].start : a, e2 = v[j].end < b ? v[j].end : b;
				if (s2 < e2 && !v[j].ours)
					on_own_stack(2, s2, e2, v[j].prot);
			}
			return r;
		}
	}
	return 0;
}

/* make_private maps [a, b) private again, where it is still the file's,
 * and drops its pages from the file. */
static void make_private(uintptr_t a, uintptr_t b)
{
	struct vma v[64];
	int nv = vmas(a, b, v, 64);
	for (int i = 0; i < nv; i++)
		if (v[i].ours)
			on_own_stack(2, v[i].start, v[i].end, v[i].prot);
	fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a));
}

int gr_mem_share(uintptr_t start, uintptr_t end, int writable)
{
	if (start >= end || end > GOROCE_MEM_FILE_SIZE)
		return EFAULT;
	if (gr_mem_fd() < 0)
		return errno;
	pthread_mutex_lock(&mem_lock);
	struct vma v[64];
	int nv = vmas(start, end, v, 64);
	int r = nv < 0 ? EFAULT : 0;
	if (!r)
		for (int i = 0; i < nv; i++)
			if (writable && !(v[i].prot & PROT_WRITE))
				r = EFAULT;
	if (!r)
		r = seg_split(start);
	if (!r)
		r = seg_split(end);
	uintptr_t at = start;
	size_t i = 0;
	while (!r && at < end) {
		while (i < nsegs && segs[i].end <= at)
			i++;
		if (i < nsegs && segs[i].start <= at) {
			at = segs[i].end;
			i++;
			continue;
		}
		uintptr_t gap_end = i < nsegs && segs[i].start < end ? segs[i].start : end;
		r = share_gap(at, gap_end, v, nv, writable);
		if (!r)
			r = seg_insert(i, (struct seg){at, gap_end, 0});
		at = gap_end;
	}
	if (!r) {
		for (size_t j = 0; j < nsegs; j++)
			if (segs[j].start >= start && segs[j].end <= end)
				segs[j].refs++;
	} else {
		/* Undo the segments this call made (refs 0). */
		for (size_t j = 0; j < nsegs;)
			if (segs[j].refs == 0) {
				make_private(segs[j].start, segs[j].end);
				seg_remove(j);
			} else
				j++;
	}
	pthread_mutex_unlock(&mem_lock);
	return r;
}

void gr_mem_unshare(uintptr_t start, uintptr_t end)
{
	pthread_mutex_lock(&mem_lock);
	if (memfd >= 0 && !seg_split(start) && !seg_split(end)) {
		for (size_t i = 0; i < nsegs;) {
			struct seg *s = &segs[i];
			if (s->start >= start && s->end <= end && s->refs && --s->refs == 0) {
				make_private(s->start, s->end);
				seg_remove(i);
				continue;
			}
			i++;
		}
	}
	pthread_mutex_unlock(&mem_lock);
}

/* fork */

static void prepare(void)
{
	gr_fork_prepare();
	pthread_mutex_lock(&mem_lock);
}

static void parent(void)
{
	pthread_mutex_unlock(&mem_lock);
	gr_fork_parent();
}

static void child(void)
{
	/* The child's copies of the shared pages become its own. It must
	 * not drop them from the file: that is the parent's memory. */
	for (size_t i = 0; i < nsegs; i++) {
		struct vma v[64];
		int nv = vmas(segs[i].start, segs[i].end, v, 64);
		for (int j = 0; j < nv; j++)
			if (v[j].ours)
				on_own_stack(2, v[j].start, v[j].end, v[j].prot);
	}
	nsegs = 0;
	if (memfd >= 0)
		close(memfd);
	memfd = -1;
	atomic_fetch_add(&gr_fork_gen, 1);
	pthread_mutex_unlock(&mem_lock);
	gr_ctx_forked();
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init(void) { pthread_atfork(prepare, parent, child); }
void gr_mem_init(void) { pthread_once(&init_once, init); }

EXPORT int ibv_fork_init(void)
{
	gr_mem_init();
	return 0;
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }

EXPORT int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

EXPORT int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
