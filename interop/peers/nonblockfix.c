/*
 * nonblockfix: an LD_PRELOAD shim that lets librdmacm's librspreload.so
 * take the sockets of programs that ask socket() for SOCK_NONBLOCK or
 * SOCK_CLOEXEC, as curl 8 does (Debian 13's 8.14: socket(AF_INET,
 * SOCK_STREAM | SOCK_NONBLOCK, IPPROTO_TCP); Debian 12's 7.88 set
 * O_NONBLOCK with fcntl afterwards). rsocket() refuses any type but
 * SOCK_STREAM and SOCK_DGRAM, so librspreload hands such a program a
 * kernel socket, and its connection never reaches the rsocket server.
 *
 * Preloaded before librspreload.so (LD_PRELOAD=nonblockfix.so:librspreload.so),
 * it asks the next socket() for the bare type and then sets O_NONBLOCK
 * with fcntl, which librspreload passes to rfcntl. FD_CLOEXEC is asked of
 * fcntl too; rfcntl refuses F_SETFD, so an rsocket goes without it, which
 * a program that does not exec does not notice. Other sockets, and those
 * without either flag, pass through unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/socket.h>

typedef int (*socket_fn)(int, int, int);

int socket(int domain, int type, int protocol)
{
	static socket_fn next;
	int flags = type & (SOCK_NONBLOCK | SOCK_CLOEXEC);
	int fd;

	if (!next)
		next = (socket_fn) dlsym(RTLD_NEXT, "socket");
	if (!next)
		return -1;
	if (!flags || (domain != AF_INET && domain != AF_INET6))
		return next(domain, type, protocol);
	fd = next(domain, type & ~flags, protocol);
	if (fd < 0)
		return fd;
	if ((flags & SOCK_NONBLOCK) && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		close(fd);
		return -1;
	}
	if (flags & SOCK_CLOEXEC)
		(void) fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}
