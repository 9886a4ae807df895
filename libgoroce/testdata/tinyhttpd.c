/* tinyhttpd is a plain socket HTTP server, as one writes it without
 * RDMA in mind: socket, bind, listen, accept, read the request, write an
 * answer naming the peer, close; COUNT connections, then it exits.
 *
 *   tinyhttpd ADDR PORT COUNT
 *
 * Under LD_PRELOAD=librspreload.so its sockets are rsockets. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: tinyhttpd ADDR PORT COUNT\n");
		return 2;
	}
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1) {
		fprintf(stderr, "tinyhttpd: %s is not an IPv4 address\n", argv[1]);
		return 2;
	}
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 8)) {
		perror("tinyhttpd: listen");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("listening\n");
	for (int n = atoi(argv[3]); n > 0; n--) {
		struct sockaddr_in peer;
		socklen_t pl = sizeof peer;
		int c = accept(l, (struct sockaddr *)&peer, &pl);
		if (c < 0) {
			perror("tinyhttpd: accept");
			return 1;
		}
		char req[4096];
		size_t have = 0;
		while (have < sizeof req - 1) { /* up to the blank line that ends the head */
			ssize_t k = read(c, req + have, sizeof req - 1 - have);
			if (k <= 0)
				break;
			have += k;
			req[have] = 0;
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		char body[256], out[512];
		int bl = snprintf(body, sizeof body, "tinyhttpd answers %s:%d\n", inet_ntoa(peer.sin_addr), ntohs(peer.sin_port));
		int ol = snprintf(out, sizeof out,
				  "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", bl,
				  body);
		if (write(c, out, ol) != ol)
			perror("tinyhttpd: write");
		close(c);
		printf("served %s", body);
	}
	close(l);
	return 0;
}
