/* raw_reader FILE [MAX_BYTES]: read FILE (a trace_pipe_raw) with 64 KiB
 * read()s, non-blocking, until EAGAIN, end of file or MAX_BYTES; print
 * "<bytes> <seconds> <reads>" on stdout.  The same reader measures the fake
 * and the real tracefs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	static char buf[65536];
	long long total = 0, max = argc > 2 ? atoll(argv[2]) : 0;
	long reads = 0;
	double t0, t1;
	int fd;

	if (argc < 2) {
		fprintf(stderr, "usage: raw_reader FILE [MAX_BYTES]\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	t0 = now();
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		total += n;
		reads++;
		if (max && total >= max)
			break;
	}
	t1 = now();
	printf("%lld %.6f %ld\n", total, t1 - t0, reads);
	return 0;
}
