/*
 * floor_server: the least a FUSE server can do for floor_client.c's
 * passes: a libfuse low-level server in C, one thread, answering every
 * request at once from a table built at start.
 *
 *     floor_server MOUNTPOINT LIST [--spin|--cache-dir]
 *
 * The tree is LIST's "system/event" directories, each with a `filter`
 * ("none\n"), a `trigger` (the "# Available triggers:" text of a kernel without
 * hist triggers, as the fake's 6.18 profile gives it), a `format` (a
 * typical event's, 1 KiB), `enable` and `id`,
 * with what the fake gives the same files: entries and attributes kept a
 * day, every file opened FOPEN_DIRECT_IO, FLUSH answered ENOSYS (so the
 * kernel stops sending it), writes accepted whole.
 *
 * Without --spin it runs libfuse's own loop (fuse_session_loop: the thread
 * sleeps in read(2) on /dev/fuse between requests).  With --spin it polls
 * /dev/fuse without sleeping until a request is there, then takes it: a
 * server that is never woken, which is what the fake's pyfuse3 does for 30
 * us after each reply (patches/pyfuse3-*-fastpath.patch).
 * bench/bench_floor.py times the same passes against both, the fake and
 * the real tracefs: what is left between the fake and the kernel that no
 * server can take away.  With --cache-dir its directories are opened
 * FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE (the kernel keeps their listings):
 * what a directory walk would cost a server that asks for that, which
 * pyfuse3 3.5 cannot (its opendir reply sets no flags).
 */
#define FUSE_USE_VERSION 34
#include <errno.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TIMEOUT 86400.0
#define SLOTS (1 << 16) /* hash slots for (parent, name): > 3x the nodes of 2,305 events */

struct node {
	fuse_ino_t parent;
	char *name;
	int dir;
	fuse_ino_t child, next; /* first child; next sibling */
};

static int cache_dir;

static struct node *nodes; /* index = inode; 1 = the root */
static fuse_ino_t nnodes = 2;
static fuse_ino_t slots[SLOTS];

static const char FILTER[] = "none\n";
static const char TRIGGER[] =
	"# Available triggers:\n"
	"# traceon traceoff snapshot stacktrace enable_event disable_event\n";
static char FORMAT[1024];

static unsigned slot_of(fuse_ino_t parent, const char *name)
{
	unsigned h = 2166136261u ^ (unsigned)parent;

	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	return h & (SLOTS - 1);
}

static fuse_ino_t find(fuse_ino_t parent, const char *name)
{
	for (unsigned s = slot_of(parent, name); slots[s]; s = (s + 1) & (SLOTS - 1))
		if (nodes[slots[s]].parent == parent && !strcmp(nodes[slots[s]].name, name))
			return slots[s];
	return 0;
}

static fuse_ino_t add(fuse_ino_t parent, const char *name, int dir)
{
	fuse_ino_t ino = find(parent, name);
	unsigned s;

	if (ino)
		return ino;
	nodes = realloc(nodes, (nnodes + 1) * sizeof(*nodes));
	nodes[nnodes] = (struct node){ parent, strdup(name), dir, 0, nodes[parent].child };
	nodes[parent].child = nnodes;
	for (s = slot_of(parent, name); slots[s]; s = (s + 1) & (SLOTS - 1))
		;
	slots[s] = nnodes;
	return nnodes++;
}

static void fill(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = nodes[ino].dir ? S_IFDIR | 0755 : S_IFREG | 0640;
	st->st_nlink = nodes[ino].dir ? 2 : 1;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .attr_timeout = TIMEOUT, .entry_timeout = TIMEOUT };

	e.ino = find(parent, name);
	if (!e.ino) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	fill(ino, &st);
	fuse_reply_attr(req, &st, TIMEOUT);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	(void)attr, (void)to_set;
	op_getattr(req, ino, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fi->direct_io = 1;
	fi->fh = ino;
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	const char *name = nodes[ino].name;
	const char *text = !strcmp(name, "filter") ? FILTER : !strcmp(name, "format") ? FORMAT :
			   !strcmp(name, "trigger") ? TRIGGER : "0\n";
	size_t len = strlen(text);

	(void)fi;
	if ((size_t)off >= len) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	fuse_reply_buf(req, text + off, len - off < size ? len - off : size);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *data, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino, (void)data, (void)off, (void)fi;
	fuse_reply_write(req, size);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, ENOSYS);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, 0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fi->fh = ino;
	if (cache_dir)
		fi->cache_readdir = fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* READDIRPLUS: the children from *off* (their index), each with its attributes */
static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	char *buf = malloc(size);
	size_t used = 0;
	off_t i = 0;

	(void)fi;
	for (fuse_ino_t c = nodes[ino].child; c; c = nodes[c].next, i++) {
		struct fuse_entry_param e = { .ino = c, .attr_timeout = TIMEOUT,
					      .entry_timeout = TIMEOUT };
		size_t n;

		if (i < off)
			continue;
		fill(c, &e.attr);
		n = fuse_add_direntry_plus(req, buf + used, size - used, nodes[c].name, &e, i + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino, (void)fi;
	fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops ops = {
	.lookup = op_lookup, .getattr = op_getattr, .setattr = op_setattr,
	.open = op_open, .read = op_read, .write = op_write, .flush = op_flush,
	.release = op_release, .opendir = op_opendir, .readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
};

/* the --spin loop: poll(2) without a timeout until a request waits, then take it */
static void spin_loop(struct fuse_session *se)
{
	struct fuse_buf fbuf = { 0 };
	struct pollfd pfd = { .fd = fuse_session_fd(se), .events = POLLIN };

	while (!fuse_session_exited(se)) {
		while (poll(&pfd, 1, 0) == 0)
			;
		int res = fuse_session_receive_buf(se, &fbuf);
		if (res == -EINTR)
			continue;
		if (res <= 0)
			break; /* unmounted */
		fuse_session_process_buf(se, &fbuf);
	}
	free(fbuf.mem);
}

int main(int argc, char **argv)
{
	char line[512], *fargv[] = { argv[0], "-o", "default_permissions", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se;
	FILE *list;

	if (argc < 3 || (argc == 4 && strcmp(argv[3], "--spin") && strcmp(argv[3], "--cache-dir"))
	    || argc > 4) {
		fprintf(stderr, "usage: %s MOUNTPOINT LIST [--spin|--cache-dir]\n", argv[0]);
		return 2;
	}
	cache_dir = argc == 4 && !strcmp(argv[3], "--cache-dir");
	memset(FORMAT, 'x', sizeof(FORMAT) - 1);
	for (size_t i = 63; i < sizeof(FORMAT) - 1; i += 64)
		FORMAT[i] = '\n';
	nodes = calloc(2, sizeof(*nodes));
	nodes[1] = (struct node){ 0, "", 1 };
	list = fopen(argv[2], "r");
	if (!list) {
		perror(argv[2]);
		return 1;
	}
	while (fgets(line, sizeof(line), list)) {
		char *event;
		fuse_ino_t dir;

		line[strcspn(line, "\n")] = 0;
		event = strchr(line, '/');
		if (!event)
			continue;
		*event++ = 0;
		dir = add(add(1, line, 1), event, 1);
		add(dir, "enable", 0);
		add(dir, "filter", 0);
		add(dir, "format", 0);
		add(dir, "id", 0);
		add(dir, "trigger", 0);
	}
	fclose(list);
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se || fuse_session_mount(se, argv[1]))
		return 1;
	printf("mounted\n");
	fflush(stdout);
	if (argc == 4 && !cache_dir)
		spin_loop(se);
	else
		fuse_session_loop(se);
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	return 0;
}
