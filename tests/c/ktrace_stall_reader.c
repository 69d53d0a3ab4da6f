/* ktrace_stall_reader MNT GAP_MS STOP_FILE: a ktrace reader that stalls.
 *
 * Every round, for each CPU whose buffers/cpuN polls readable: GET_PRODUCED,
 * then sleep GAP_MS milliseconds (a reader descheduled, swapped out, stopped
 * in a debugger), then GET_CONSUMED; copy the pages in [consumed, produced)
 * out of the MAP_SHARED mapping, count their events, PUT_CONSUMED(produced).
 * A round where consumed is past produced ((produced - consumed) mod 2^32
 * larger than the buffer) is counted in "bad_rounds" and nothing is read.
 * When STOP_FILE exists it writes 0 to ktrace/enabled (the tail pages are
 * finished), drains without stalling and prints one JSON line:
 *   {"read": N, "overflow": N, "rounds": N, "bad_rounds": N, "pages": N}
 * Only the RFC's interface is used (the 2009 ktrace RFC and
 * docs/ktrace.md#the-buffer-protocol). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/ioctl.h>
#include <linux/types.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define KTRACE_BUF_GET_SIZE     _IOR(0xF5, 0x00, __u32)
#define KTRACE_BUF_GET_PRODUCED _IOR(0xF5, 0x01, __u32)
#define KTRACE_BUF_GET_CONSUMED _IOR(0xF5, 0x02, __u32)
#define KTRACE_BUF_PUT_CONSUMED _IOW(0xF5, 0x04, __u32)
#define PAGE 4096
#define MAX_CPUS 64

struct cpu {
	int fd;
	uint32_t size;
	unsigned char *map;
};

static struct cpu cpus[MAX_CPUS];
static int ncpus;
static uint64_t n_read, n_rounds, n_bad, n_pages;

static void die(const char *what)
{
	fprintf(stderr, "ktrace_stall_reader: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint32_t get(int fd, unsigned long cmd)
{
	__u32 v = 0;

	if (ioctl(fd, cmd, &v) < 0)
		die("ioctl");
	return v;
}

/* Data events in one ring-buffer page (docs/tracefs.md#ring-buffer-page-format). */
static uint64_t count_events(const unsigned char *page)
{
	uint64_t commit, n = 0;
	uint32_t off = 16, end;

	memcpy(&commit, page + 8, 8);
	end = 16 + (uint32_t)(commit & ((1u << 27) - 1));
	if (end > PAGE)
		end = PAGE;
	while (off + 4 <= end) {
		uint32_t word, type_len, len;

		memcpy(&word, page + off, 4);
		type_len = word & 0x1f;
		if (type_len == 29) {		/* padding */
			if ((word >> 5) == 0 || off + 8 > end)
				break;
			memcpy(&len, page + off + 4, 4);
			off += 4 + len;
		} else if (type_len == 30 || type_len == 31) {	/* time extend, stamp */
			off += 8;
		} else if (type_len == 0) {	/* long payload: length + 4 at +4 */
			if (off + 8 > end)
				break;
			memcpy(&len, page + off + 4, 4);
			off += 8 + ((len - 4 + 3) & ~3u);
			n++;
		} else {
			off += 4 + type_len * 4;
			n++;
		}
	}
	return n;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* One round on one CPU; returns the pages taken. */
static uint32_t take(struct cpu *c, long gap_ms)
{
	static unsigned char page[PAGE];
	uint32_t produced = get(c->fd, KTRACE_BUF_GET_PRODUCED), consumed, n;
	__u32 arg = produced;

	if (gap_ms)
		sleep_ms(gap_ms);
	consumed = get(c->fd, KTRACE_BUF_GET_CONSUMED);
	n_rounds++;
	n = (uint32_t)(produced - consumed) / PAGE;
	if ((uint32_t)(produced - consumed) > c->size) {
		n_bad++;
		n = 0;
	}
	for (uint32_t k = 0; k < n; k++) {
		memcpy(page, c->map + (uint32_t)(consumed + k * PAGE) % c->size, PAGE);
		n_read += count_events(page);
	}
	n_pages += n;
	if (ioctl(c->fd, KTRACE_BUF_PUT_CONSUMED, &arg) < 0)
		die("PUT_CONSUMED");
	return n;
}

static void write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || write(fd, text, strlen(text)) < 0)
		die(path);
	close(fd);
}

static long read_long(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY);

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) < 0)
		die(path);
	close(fd);
	return atol(buf);
}

int main(int argc, char **argv)
{
	struct pollfd pfds[MAX_CPUS];
	char path[4096];
	long gap_ms;
	uint32_t got;

	if (argc != 4) {
		fprintf(stderr, "usage: ktrace_stall_reader MNT GAP_MS STOP_FILE\n");
		return 2;
	}
	gap_ms = atol(argv[2]);
	for (ncpus = 0; ncpus < MAX_CPUS; ncpus++) {
		struct cpu *c = &cpus[ncpus];

		snprintf(path, sizeof(path), "%s/ktrace/buffers/cpu%d", argv[1], ncpus);
		c->fd = open(path, O_RDONLY);
		if (c->fd < 0)
			break;
		c->size = get(c->fd, KTRACE_BUF_GET_SIZE);
		c->map = mmap(NULL, c->size, PROT_READ, MAP_SHARED, c->fd, 0);
		if (c->map == MAP_FAILED)
			die("mmap");
		pfds[ncpus].fd = c->fd;
		pfds[ncpus].events = POLLIN;
	}
	if (!ncpus)
		die("no ktrace/buffers/cpuN");
	while (access(argv[3], F_OK) != 0) {
		int n = poll(pfds, ncpus, 100);

		if (n < 0 && errno != EINTR)
			die("poll");
		for (int i = 0; n > 0 && i < ncpus; i++)
			if (pfds[i].revents & POLLIN)
				take(&cpus[i], gap_ms);
	}
	snprintf(path, sizeof(path), "%s/ktrace/enabled", argv[1]);
	write_file(path, "0");
	do {
		got = 0;
		for (int i = 0; i < ncpus; i++)
			got += take(&cpus[i], 0);
	} while (got);
	snprintf(path, sizeof(path), "%s/ktrace/overflow", argv[1]);
	printf("{\"read\": %" PRIu64 ", \"overflow\": %ld, \"rounds\": %" PRIu64
	       ", \"bad_rounds\": %" PRIu64 ", \"pages\": %" PRIu64 "}\n",
	       n_read, read_long(path), n_rounds, n_bad, n_pages);
	return 0;
}
