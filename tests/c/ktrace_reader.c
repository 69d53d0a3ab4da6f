/*
 * ktrace_reader: a ktrace client that knows only the 2009 ktrace RFC and the
 * buffer protocol of docs/ktrace.md#the-buffer-protocol.
 *
 * It reads ktrace/info for event ids and names, opens every
 * ktrace/buffers/cpuN, asks its size (KTRACE_BUF_GET_SIZE), maps it
 * (MAP_SHARED, PROT_READ) and polls all of them.  For each ready CPU it takes
 * GET_PRODUCED and GET_CONSUMED, copies the pages in [consumed, produced)
 * out of the mapping, decodes their ring-buffer events and hands the pages
 * back with PUT_CONSUMED(produced).  Events are counted per name (a payload
 * starts with the u16 event id).
 *
 * It stops on SIGINT/SIGTERM, when --until-file exists, after --max-seconds,
 * or at once with --drain; then it writes 0 to ktrace/enabled (which
 * finishes every tail page; --no-disable skips it), drains what is left and
 * prints a summary:
 *
 *   read=N pages=P overflow=O ... then one "NAME COUNT" line per event name
 *
 * or, with --json, one JSON object {"read": N, ..., "counts": {NAME: COUNT}}.
 *
 *   ktrace_reader MNT [--sleep-ms N] [--until-file PATH] [--max-seconds S]
 *                     [--drain] [--no-disable] [--ready-file PATH]
 *                     [--dump PATH] [--json]
 */

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/ioctl.h>
#include <linux/types.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* include/linux/ktrace.h of the RFC */
#define KTRACE_BUF_GET_SIZE _IOR(0xF5, 0x00, __u32)
#define KTRACE_BUF_GET_PRODUCED _IOR(0xF5, 0x01, __u32)
#define KTRACE_BUF_GET_CONSUMED _IOR(0xF5, 0x02, __u32)
#define KTRACE_BUF_PUT_PRODUCED _IOW(0xF5, 0x03, __u32)
#define KTRACE_BUF_PUT_CONSUMED _IOW(0xF5, 0x04, __u32)

#define PAGE 4096
#define PAGE_HDR 16
#define PAGE_DATA (PAGE - PAGE_HDR)
#define COMMIT_MASK ((1u << 27) - 1)
#define MISSED_EVENTS (1ull << 31)
#define MAX_CPUS 1024
#define NIDS 65536

struct cpu {
	int nr;
	int fd;
	uint32_t size;
	const unsigned char *map;
	uint64_t last_ts;
	int have_ts;
};

static struct cpu cpus[MAX_CPUS];
static int ncpus;
static const char *mnt;
static char *names[NIDS];
static uint64_t counts[NIDS];
static int reread_info_pending;

static uint64_t n_read, n_pages, n_missed_pages, n_bad, n_unknown, n_backwards,
	n_ioctl_errors;
static FILE *dump;
static volatile sig_atomic_t stop_requested;

static void die(const char *what)
{
	fprintf(stderr, "ktrace_reader: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint32_t get_u32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get_u64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* --- ktrace/info: "name '%s' format '%s' id %u enabled|disabled" ----------- */

static void read_info(void)
{
	char path[4096], *line = NULL;
	size_t cap = 0;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/ktrace/info", mnt);
	fp = fopen(path, "r");
	if (!fp)
		die(path);
	while (getline(&line, &cap, fp) > 0) {
		char *name, *end, *idp;
		unsigned long id;

		if (strncmp(line, "name '", 6) != 0)
			continue;
		name = line + 6;
		end = strstr(name, "' format '");
		idp = strstr(name, "' id ");
		if (!end || !idp)
			continue;
		/* the format may contain "' id " itself: take the last one */
		for (char *q = idp; (q = strstr(q + 1, "' id ")) != NULL;)
			idp = q;
		*end = 0;
		id = strtoul(idp + 5, NULL, 10);
		free(names[id & 0xFFFF]);
		names[id & 0xFFFF] = strdup(name);
	}
	free(line);
	fclose(fp);
}

/* --- one page ------------------------------------------------------------- */

static void event(struct cpu *c, uint64_t ts, const unsigned char *payload, uint32_t len)
{
	uint16_t id;

	if (len < 2) {
		n_bad++;
		return;
	}
	memcpy(&id, payload, 2);
	if (!names[id])
		reread_info_pending = 1;
	counts[id]++;
	n_read++;
	if (c->have_ts && ts < c->last_ts)
		n_backwards++;
	c->last_ts = ts;
	c->have_ts = 1;
	if (dump) {
		fprintf(dump, "%d %" PRIu64 " %u ", c->nr, ts, id);
		for (uint32_t i = 0; i < len; i++)
			fprintf(dump, "%02x", payload[i]);
		fputc('\n', dump);
	}
}

static void decode_page(struct cpu *c, const unsigned char *page)
{
	uint64_t ts = get_u64(page), commit = get_u64(page + 8);
	uint32_t len = commit & COMMIT_MASK, off = 0;
	const unsigned char *data = page + PAGE_HDR;

	n_pages++;
	if (commit & MISSED_EVENTS)
		n_missed_pages++;
	if (len > PAGE_DATA) {
		n_bad++;
		return;
	}
	while (off + 4 <= len) {
		uint32_t word = get_u32(data + off);
		uint32_t type_len = word & 0x1F, delta = word >> 5;

		if (type_len == 29) {			/* padding */
			if (delta == 0)			/* the rest of the page */
				return;
			if (off + 8 > len) {
				n_bad++;
				return;
			}
			off += 4 + get_u32(data + off + 4);
		} else if (type_len == 30) {		/* time extend */
			if (off + 8 > len) {
				n_bad++;
				return;
			}
			ts += ((uint64_t)get_u32(data + off + 4) << 27) + delta;
			off += 8;
		} else if (type_len == 31) {		/* absolute time stamp */
			if (off + 8 > len) {
				n_bad++;
				return;
			}
			ts = ((uint64_t)get_u32(data + off + 4) << 27) + delta;
			off += 8;
		} else if (type_len == 0) {		/* large event */
			uint32_t size;

			if (off + 8 > len) {
				n_bad++;
				return;
			}
			size = get_u32(data + off + 4);	/* payload + 4 */
			if (size < 4 || off + 4 + size > len) {
				n_bad++;
				return;
			}
			ts += delta;
			event(c, ts, data + off + 8, size - 4);
			off += 4 + ((size + 3) & ~3u);
		} else {				/* 1..28: small event */
			uint32_t size = type_len * 4;

			if (off + 4 + size > len) {
				n_bad++;
				return;
			}
			ts += delta;
			event(c, ts, data + off + 4, size);
			off += 4 + size;
		}
	}
}

/* --- the produced/consumed protocol ----------------------------------------- */

static uint32_t ioctl_get(struct cpu *c, unsigned long cmd)
{
	__u32 v = 0;

	if (ioctl(c->fd, cmd, &v) < 0) {
		n_ioctl_errors++;
		fprintf(stderr, "ktrace_reader: cpu%d: ioctl %#lx: %s\n", c->nr, cmd,
			strerror(errno));
		return 0;
	}
	return v;
}

/* Take every complete page of *c*; returns how many. */
static uint32_t drain_cpu(struct cpu *c)
{
	static unsigned char page[PAGE];
	uint32_t produced = ioctl_get(c, KTRACE_BUF_GET_PRODUCED);
	uint32_t consumed = ioctl_get(c, KTRACE_BUF_GET_CONSUMED);
	uint32_t n = (uint32_t)(produced - consumed) / PAGE;
	__u32 arg = produced;

	if (n > c->size / PAGE) {	/* never more than the buffer holds */
		n_bad++;
		n = c->size / PAGE;
	}
	for (uint32_t k = 0; k < n; k++) {
		uint32_t off = (uint32_t)(consumed + k * PAGE) % c->size;

		memcpy(page, c->map + off, PAGE);
		decode_page(c, page);
	}
	/* always hand back, even nothing: the writer may reuse the pages */
	if (ioctl(c->fd, KTRACE_BUF_PUT_CONSUMED, &arg) < 0) {
		n_ioctl_errors++;
		fprintf(stderr, "ktrace_reader: cpu%d: PUT_CONSUMED: %s\n", c->nr,
			strerror(errno));
	}
	if (reread_info_pending) {
		reread_info_pending = 0;
		read_info();
	}
	return n;
}

static void drain_all(void)
{
	uint32_t got;

	do {
		got = 0;
		for (int i = 0; i < ncpus; i++)
			got += drain_cpu(&cpus[i]);
	} while (got);
}

static void write_enabled(const char *value)
{
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/ktrace/enabled", mnt);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		die(path);
	if (write(fd, value, strlen(value)) != (ssize_t)strlen(value))
		die(path);
	close(fd);
}

static long read_overflow(void)
{
	char path[4096], buf[64] = "";
	long v = -1;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/ktrace/overflow", mnt);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path);
	n = read(fd, buf, sizeof(buf) - 1);
	if (n > 0) {
		buf[n] = 0;
		v = strtol(buf, NULL, 10);
	}
	close(fd);
	return v;
}

static int cmp_cpu(const void *a, const void *b)
{
	return ((const struct cpu *)a)->nr - ((const struct cpu *)b)->nr;
}

static void open_buffers(void)
{
	char dir[4096], path[8192];
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/ktrace/buffers", mnt);
	d = opendir(dir);
	if (!d)
		die(dir);
	while ((de = readdir(d)) != NULL) {
		struct cpu *c;
		__u32 size = 0;
		void *map;

		if (strncmp(de->d_name, "cpu", 3) != 0)
			continue;
		if (ncpus == MAX_CPUS) {
			fprintf(stderr, "ktrace_reader: too many CPUs\n");
			exit(2);
		}
		c = &cpus[ncpus];
		c->nr = atoi(de->d_name + 3);
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		c->fd = open(path, O_RDONLY);
		if (c->fd < 0)
			die(path);
		if (ioctl(c->fd, KTRACE_BUF_GET_SIZE, &size) < 0)
			die("KTRACE_BUF_GET_SIZE");
		if (size == 0 || size % PAGE) {
			fprintf(stderr, "ktrace_reader: %s: bad size %u\n", path, size);
			exit(2);
		}
		c->size = size;
		map = mmap(NULL, size, PROT_READ, MAP_SHARED, c->fd, 0);
		if (map == MAP_FAILED)
			die("mmap");
		c->map = map;
		ncpus++;
	}
	closedir(d);
	if (!ncpus) {
		fprintf(stderr, "ktrace_reader: %s: no cpuN files\n", dir);
		exit(2);
	}
	qsort(cpus, ncpus, sizeof(cpus[0]), cmp_cpu);
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void usage(void)
{
	fprintf(stderr,
		"usage: ktrace_reader MNT [--sleep-ms N] [--until-file PATH] "
		"[--max-seconds S] [--drain] [--no-disable] [--ready-file PATH] "
		"[--dump PATH] [--json]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *until_file = NULL, *ready_file = NULL, *dump_file = NULL;
	long sleep_ms = 0;
	double max_seconds = 0, t0, t1, start;
	int drain = 0, disable = 1, json = 0;
	struct pollfd *pfds;
	struct sigaction sa;
	long overflow;

	if (argc < 2)
		usage();
	mnt = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--sleep-ms") && i + 1 < argc)
			sleep_ms = atol(argv[++i]);
		else if (!strcmp(a, "--until-file") && i + 1 < argc)
			until_file = argv[++i];
		else if (!strcmp(a, "--max-seconds") && i + 1 < argc)
			max_seconds = atof(argv[++i]);
		else if (!strcmp(a, "--ready-file") && i + 1 < argc)
			ready_file = argv[++i];
		else if (!strcmp(a, "--dump") && i + 1 < argc)
			dump_file = argv[++i];
		else if (!strcmp(a, "--drain"))
			drain = 1;
		else if (!strcmp(a, "--no-disable"))
			disable = 0;
		else if (!strcmp(a, "--json"))
			json = 1;
		else
			usage();
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if (dump_file) {
		dump = fopen(dump_file, "w");
		if (!dump)
			die(dump_file);
	}
	read_info();
	open_buffers();
	pfds = calloc(ncpus, sizeof(*pfds));
	for (int i = 0; i < ncpus; i++) {
		pfds[i].fd = cpus[i].fd;
		pfds[i].events = POLLIN;
	}
	if (ready_file) {
		int fd = open(ready_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd < 0)
			die(ready_file);
		close(fd);
	}

	start = t0 = now_s();
	while (!drain && !stop_requested) {
		int n = poll(pfds, ncpus, 100);

		if (n < 0 && errno != EINTR)
			die("poll");
		for (int i = 0; n > 0 && i < ncpus; i++) {
			if (pfds[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
				fprintf(stderr, "ktrace_reader: cpu%d: poll revents %#x\n",
					cpus[i].nr, pfds[i].revents);
				exit(3);
			}
			if (pfds[i].revents & POLLIN)
				drain_cpu(&cpus[i]);
		}
		if (until_file && access(until_file, F_OK) == 0)
			break;
		if (max_seconds > 0 && now_s() - start > max_seconds)
			break;
		if (sleep_ms > 0 && !stop_requested)
			usleep(sleep_ms * 1000);
	}

	/* the stop: disabling finishes every tail page, then take everything */
	if (drain)
		t0 = now_s();
	if (disable)
		write_enabled("0");
	drain_all();
	t1 = now_s();
	overflow = read_overflow();
	if (dump)
		fclose(dump);
	for (int id = 0; id < NIDS; id++)
		if (counts[id] && !names[id])
			n_unknown += counts[id];

	if (json) {
		int first = 1;

		printf("{\"read\": %" PRIu64 ", \"pages\": %" PRIu64 ", \"overflow\": %ld, "
		       "\"missed_pages\": %" PRIu64 ", \"bad\": %" PRIu64 ", \"unknown\": %" PRIu64
		       ", \"backwards\": %" PRIu64 ", \"ioctl_errors\": %" PRIu64
		       ", \"cpus\": %d, \"seconds\": %.6f, \"counts\": {",
		       n_read, n_pages, overflow, n_missed_pages, n_bad, n_unknown,
		       n_backwards, n_ioctl_errors, ncpus, t1 - t0);
		for (int id = 0; id < NIDS; id++) {
			char anon[32];

			if (!counts[id])
				continue;
			snprintf(anon, sizeof(anon), "unknown-%d", id);
			printf("%s", first ? "" : ", ");
			json_string(names[id] ? names[id] : anon);
			printf(": %" PRIu64, counts[id]);
			first = 0;
		}
		printf("}}\n");
	} else {
		printf("read=%" PRIu64 "\npages=%" PRIu64 "\noverflow=%ld\nmissed_pages=%" PRIu64
		       "\nbad=%" PRIu64 "\nunknown=%" PRIu64 "\nbackwards=%" PRIu64
		       "\nioctl_errors=%" PRIu64 "\ncpus=%d\nseconds=%.6f\n",
		       n_read, n_pages, overflow, n_missed_pages, n_bad, n_unknown, n_backwards,
		       n_ioctl_errors, ncpus, t1 - t0);
		for (int id = 0; id < NIDS; id++)
			if (counts[id]) {
				if (names[id])
					printf("%s %" PRIu64 "\n", names[id], counts[id]);
				else
					printf("unknown-%d %" PRIu64 "\n", id, counts[id]);
			}
	}
	return 0;
}
