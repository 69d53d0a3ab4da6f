/* splice_cat FILE [LEN] [nonblock]: copy FILE to stdout the way libtracefs'
 * tracefs_cpu_write() does: splice(FILE -> pipe, LEN), then read the pipe.
 * Stops at the first 0 (end of file) or EAGAIN; prints the splice count and
 * the last errno on stderr. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	size_t len = argc > 2 ? strtoul(argv[2], NULL, 0) : 65536;
	unsigned flags = SPLICE_F_MOVE;
	int fd, p[2], calls = 0;
	ssize_t n;
	char *buf;

	if (argc < 2)
		return 2;
	if (argc > 3)
		flags |= SPLICE_F_NONBLOCK;
	fd = open(argv[1], O_RDONLY);
	if (fd < 0 || pipe(p) < 0) {
		perror(argv[1]);
		return 1;
	}
	buf = malloc(len);
	for (;;) {
		n = splice(fd, NULL, p[1], NULL, len, flags);
		if (n <= 0)
			break;
		calls++;
		while (n > 0) {
			ssize_t r = read(p[0], buf, n);
			if (r <= 0)
				return 1;
			fwrite(buf, 1, r, stdout);
			n -= r;
		}
	}
	fprintf(stderr, "splices=%d last=%zd errno=%s\n", calls, n, n < 0 ? strerror(errno) : "0");
	return 0;
}
