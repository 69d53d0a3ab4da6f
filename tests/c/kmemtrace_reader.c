/*
 * A kmemtrace relay reader that knows only the August 2008 ABI:
 * the 24-byte core (u8 event id 0 alloc / 1 free, u8 type id, u16 event
 * size, s32 sequence number, u64 call site, u64 pointer) and, for
 * allocations, u64 bytes requested, u64 bytes allocated, u32 GFP flags,
 * s32 target CPU.  Packed, native endian.
 *
 * usage: kmemtrace_reader [-d] [-q] [-b BYTES] [-r READY_FILE] DIR
 *   DIR is <debugfs>/kmemtrace; cpu0, cpu1, ... are opened until one is
 *   missing.  Each is read after poll() says it is readable, until read()
 *   returns 0.  SIGINT/SIGTERM stop the loop; then every file is drained.
 *   -d: drain once and exit (no waiting for a signal).
 *   -q: no per-record lines, only the summary.
 *   -r: create READY_FILE once the files are open and signals handled.
 *   Every record is printed as
 *     cpu event type size seq call_site ptr [req alloc gfp target]
 *   and the summary "records N bytes B seconds S" goes to stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS 256

struct kmemtrace_event {
	uint8_t event_id;
	uint8_t type_id;
	uint16_t event_size;
	int32_t seq_num;
	uint64_t call_site;
	uint64_t ptr;
} __attribute__((packed));

struct kmemtrace_stats_alloc {
	uint64_t bytes_req;
	uint64_t bytes_alloc;
	uint32_t gfp_flags;
	int32_t numa_node;
} __attribute__((packed));

struct cpu_stream {
	int fd;
	unsigned char *carry;	/* bytes of a record cut by a read */
	size_t carry_len;
};

static volatile sig_atomic_t stop;
static int quiet;
static unsigned long long records, total_bytes;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* Decode whole records from buf; keep a cut tail in the stream's carry. */
static void consume(struct cpu_stream *s, int cpu, const unsigned char *buf, size_t len)
{
	unsigned char *data = malloc(s->carry_len + len);
	size_t off = 0, total = s->carry_len + len;

	if (!data) {
		perror("malloc");
		exit(1);
	}
	memcpy(data, s->carry, s->carry_len);
	memcpy(data + s->carry_len, buf, len);
	while (total - off >= sizeof(struct kmemtrace_event)) {
		struct kmemtrace_event ev;
		struct kmemtrace_stats_alloc st;
		size_t need = sizeof(ev);

		memcpy(&ev, data + off, sizeof(ev));
		if (ev.event_id > 1 || ev.type_id > 2) {
			fprintf(stderr, "cpu%d: bad record at +%zu: event %u type %u\n",
				cpu, off, ev.event_id, ev.type_id);
			exit(2);
		}
		if (ev.event_id == 0)
			need += sizeof(st);
		if (ev.event_size < need) {
			fprintf(stderr, "cpu%d: bad event size %u at +%zu\n", cpu, ev.event_size, off);
			exit(2);
		}
		if (total - off < ev.event_size)
			break;
		records++;
		if (!quiet) {
			printf("%d %u %u %u %d 0x%llx 0x%llx", cpu, ev.event_id, ev.type_id,
			       ev.event_size, ev.seq_num, (unsigned long long)ev.call_site,
			       (unsigned long long)ev.ptr);
			if (ev.event_id == 0) {
				memcpy(&st, data + off + sizeof(ev), sizeof(st));
				printf(" %llu %llu 0x%x %d", (unsigned long long)st.bytes_req,
				       (unsigned long long)st.bytes_alloc, st.gfp_flags, st.numa_node);
			}
			putchar('\n');
		}
		off += ev.event_size;	/* discard the bytes we don't know about */
	}
	free(s->carry);
	s->carry_len = total - off;
	s->carry = malloc(s->carry_len + 1);
	memcpy(s->carry, data + off, s->carry_len);
	free(data);
}

/* Read until the relay has nothing more (read returns 0). */
static void drain(struct cpu_stream *s, int cpu, unsigned char *buf, size_t size)
{
	for (;;) {
		ssize_t n = read(s->fd, buf, size);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "cpu%d: read: %s\n", cpu, strerror(errno));
			exit(1);
		}
		if (n == 0)
			return;
		total_bytes += n;
		consume(s, cpu, buf, n);
	}
}

int main(int argc, char **argv)
{
	struct cpu_stream streams[MAX_CPUS];
	struct pollfd pfd[MAX_CPUS];
	struct sigaction sa;
	struct timespec t0, t1;
	size_t size = 256 * 1024;
	unsigned char *buf;
	const char *ready = NULL;
	int opt, once = 0, ncpu = 0, i;

	while ((opt = getopt(argc, argv, "dqb:r:")) != -1) {
		if (opt == 'd')
			once = 1;
		else if (opt == 'q')
			quiet = 1;
		else if (opt == 'r')
			ready = optarg;
		else if (opt == 'b')
			size = strtoul(optarg, NULL, 0);
		else
			return 64;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "usage: %s [-d] [-q] [-b BYTES] [-r READY] KMEMTRACE_DIR\n", argv[0]);
		return 64;
	}
	for (ncpu = 0; ncpu < MAX_CPUS; ncpu++) {
		char path[4096];

		snprintf(path, sizeof(path), "%s/cpu%d", argv[optind], ncpu);
		streams[ncpu].fd = open(path, O_RDONLY);
		if (streams[ncpu].fd < 0)
			break;
		streams[ncpu].carry = NULL;
		streams[ncpu].carry_len = 0;
		pfd[ncpu].fd = streams[ncpu].fd;
		pfd[ncpu].events = POLLIN;
	}
	if (!ncpu) {
		fprintf(stderr, "%s/cpu0: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;	/* no SA_RESTART: poll returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	buf = malloc(size);
	if (ready)
		close(open(ready, O_WRONLY | O_CREAT, 0600));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!stop && !once) {
		int n = poll(pfd, ncpu, 1000);

		if (n < 0 && errno != EINTR) {
			perror("poll");
			return 1;
		}
		for (i = 0; n > 0 && i < ncpu; i++)
			if (pfd[i].revents & POLLIN)
				drain(&streams[i], i, buf, size);
	}
	poll(pfd, ncpu, 0);
	for (i = 0; i < ncpu; i++)
		drain(&streams[i], i, buf, size);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	for (i = 0; i < ncpu; i++) {
		if (streams[i].carry_len)
			fprintf(stderr, "cpu%d: %zu bytes of a cut record left\n", i, streams[i].carry_len);
		close(streams[i].fd);
	}
	fflush(stdout);
	fprintf(stderr, "records %llu bytes %llu seconds %.6f\n", records, total_bytes,
		(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	return 0;
}
