/*
 * floor_client: the per-event system calls of `trace-cmd stat` or
 * `trace-cmd reset`, and nothing else, over an `events/` directory.
 *
 *     floor_client EVENTS_DIR LIST stat|reset|walk|static
 *
 * LIST has one "system/event" a line.  The client prints "ready", then runs
 * one pass over every event each time it reads a line on stdin and answers
 * the pass's seconds on a line (bench/bench_floor.py takes the passes of
 * several servers in turn).
 *
 * What a pass does per event, as strace shows trace-cmd 3.1 doing it:
 *   stat:  stat(dir); for filter, then trigger: open(O_RDONLY), read(8192)
 *          until 0, close
 *   reset: first over all events: stat(dir), stat(filter),
 *          open(filter, O_WRONLY|O_TRUNC), write("0"), close;
 *          then over all events: stat(dir), stat(trigger), and twice:
 *          open(trigger, O_RDONLY), read until 0, close
 *   walk:  a listing of EVENTS_DIR, of each system's directory and of each
 *          event's (opendir, readdir to the end, closedir), as `ls -R`,
 *          `find` or `perf list` walk events/
 *   static: open, read until 0 and close of each event's `format`, as
 *          `trace-cmd stream`/`record` read them (twice each, at start)
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char **events;
static int nevents;
static char buf[8192];

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void path(char *out, size_t size, const char *root, int i, const char *file)
{
	if (file)
		snprintf(out, size, "%s/%s/%s", root, events[i], file);
	else
		snprintf(out, size, "%s/%s", root, events[i]);
}

static void must_stat(const char *p)
{
	struct stat st;

	if (stat(p, &st) < 0) {
		perror(p);
		exit(1);
	}
}

static void read_to_end(const char *p)
{
	int fd = open(p, O_RDONLY);

	if (fd < 0) {
		perror(p);
		exit(1);
	}
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
}

static void stat_pass(const char *root)
{
	char p[1024];

	for (int i = 0; i < nevents; i++) {
		path(p, sizeof(p), root, i, NULL);
		must_stat(p);
		path(p, sizeof(p), root, i, "filter");
		read_to_end(p);
		path(p, sizeof(p), root, i, "trigger");
		read_to_end(p);
	}
}

static void list_dir(const char *p)
{
	DIR *d = opendir(p);

	if (!d) {
		perror(p);
		exit(1);
	}
	while (readdir(d))
		;
	closedir(d);
}

static void walk_pass(const char *root)
{
	char p[1024], last[512] = "";

	list_dir(root);
	for (int i = 0; i < nevents; i++) {
		size_t sys = strcspn(events[i], "/");

		if (strncmp(last, events[i], sys) || last[sys]) { /* a new system */
			snprintf(last, sizeof(last), "%.*s", (int)sys, events[i]);
			snprintf(p, sizeof(p), "%s/%s", root, last);
			list_dir(p);
		}
		path(p, sizeof(p), root, i, NULL);
		list_dir(p);
	}
}

static void static_pass(const char *root)
{
	char p[1024];

	for (int i = 0; i < nevents; i++) {
		path(p, sizeof(p), root, i, "format");
		read_to_end(p);
	}
}

static void reset_pass(const char *root)
{
	char p[1024];

	for (int i = 0; i < nevents; i++) {
		path(p, sizeof(p), root, i, NULL);
		must_stat(p);
		path(p, sizeof(p), root, i, "filter");
		must_stat(p);
		int fd = open(p, O_WRONLY | O_TRUNC);
		if (fd < 0 || write(fd, "0", 1) != 1) {
			perror(p);
			exit(1);
		}
		close(fd);
	}
	for (int i = 0; i < nevents; i++) {
		path(p, sizeof(p), root, i, NULL);
		must_stat(p);
		path(p, sizeof(p), root, i, "trigger");
		must_stat(p);
		read_to_end(p);
		read_to_end(p);
	}
}

int main(int argc, char **argv)
{
	char line[512];
	FILE *list;

	if (argc != 4 || (strcmp(argv[3], "stat") && strcmp(argv[3], "reset") &&
			  strcmp(argv[3], "walk") && strcmp(argv[3], "static"))) {
		fprintf(stderr, "usage: %s EVENTS_DIR LIST stat|reset|walk|static\n", argv[0]);
		return 2;
	}
	list = fopen(argv[2], "r");
	if (!list) {
		perror(argv[2]);
		return 1;
	}
	while (fgets(line, sizeof(line), list)) {
		line[strcspn(line, "\n")] = 0;
		events = realloc(events, (nevents + 1) * sizeof(*events));
		events[nevents++] = strdup(line);
	}
	fclose(list);
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		double t0 = now();

		if (!strcmp(argv[3], "stat"))
			stat_pass(argv[1]);
		else if (!strcmp(argv[3], "walk"))
			walk_pass(argv[1]);
		else if (!strcmp(argv[3], "static"))
			static_pass(argv[1]);
		else
			reset_pass(argv[1]);
		printf("%.6f\n", now() - t0);
		fflush(stdout);
	}
	return 0;
}
