/*
 * percent_waiter DIR PERCENT MARKERS: how libtracefs's tracefs_cpu_read_buf()
 * waits on a trace array's CPU 0 buffer (select() on trace_pipe_raw, then
 * one read of a page).  Writes PERCENT to DIR/buffer_percent, clears the
 * buffer, starts the waiter, then (pinned to CPU 0, where trace_marker
 * records) writes MARKERS entries to DIR/trace_marker.  Prints
 * "before=<0|1> after=<0|1> read=<bytes>": whether the waiter had woken
 * before the writes, 300 ms after them, and what its read returned.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/select.h>

static int raw_fd;
static volatile int woken;
static volatile long got = -1;

static void put(const char *dir, const char *file, const char *val)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	fd = open(path, O_WRONLY | O_TRUNC);
	if (fd < 0 || write(fd, val, strlen(val)) < 0) {
		perror(path);
		exit(2);
	}
	close(fd);
}

static void *waiter(void *arg)
{
	char page[4096];
	fd_set rfds;

	(void)arg;
	FD_ZERO(&rfds);
	FD_SET(raw_fd, &rfds);
	if (select(raw_fd + 1, &rfds, NULL, NULL, NULL) == 1)
		got = read(raw_fd, page, sizeof(page));
	woken = 1;
	return NULL;
}

int main(int argc, char **argv)
{
	char path[512];
	pthread_t thread;
	cpu_set_t cpus;
	int before, n, i, fd;

	if (argc != 4) {
		fprintf(stderr, "usage: percent_waiter DIR PERCENT MARKERS\n");
		return 2;
	}
	n = atoi(argv[3]);
	CPU_ZERO(&cpus);
	CPU_SET(0, &cpus);
	if (sched_setaffinity(0, sizeof(cpus), &cpus) < 0) {
		perror("sched_setaffinity");
		return 2;
	}
	put(argv[1], "buffer_percent", argv[2]);
	put(argv[1], "trace", "");
	snprintf(path, sizeof(path), "%s/per_cpu/cpu0/trace_pipe_raw", argv[1]);
	raw_fd = open(path, O_RDONLY);
	if (raw_fd < 0) {
		perror(path);
		return 2;
	}
	pthread_create(&thread, NULL, waiter, NULL);
	usleep(200000);
	before = woken;
	snprintf(path, sizeof(path), "%s/trace_marker", argv[1]);
	fd = open(path, O_WRONLY);
	if (fd < 0) {
		perror(path);
		return 2;
	}
	for (i = 0; i < n; i++)
		if (write(fd, "hello", 5) != 5)
			perror("trace_marker");
	usleep(300000);
	printf("before=%d after=%d read=%ld\n", before, woken, woken ? got : -1L);
	fflush(stdout);
	_exit(0);  /* the waiter may still block: no join */
}
