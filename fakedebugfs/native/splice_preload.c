/*
 * splice_preload.so: make splice() work on fakedebugfs files (and, below,
 * statfs() report tracefs' magic and `mount -t tracefs -o remount` reach a fake).
 *
 * `fakedebugfs run` puts this library in LD_PRELOAD for its command.
 *
 * trace-cmd (through libtracefs' tracefs_cpu_write/_pipe/_buffered_read)
 * moves per_cpu/cpuN/trace_pipe_raw into a pipe with splice().  A FUSE file
 * opened with direct_io has no page cache behind it, so the kernel's splice
 * answers 0 (end of file) and trace-cmd records nothing while exiting 0
 * (docs/fuse.md#splice).  This wrapper emulates splice() for such files with
 * read() and write(), as the kernel's generic copy_splice_read() would:
 *
 *  - fd_in must be a regular file on a fuse.fakedebugfs mount (fstatfs
 *    f_type FUSE_SUPER_MAGIC, confirmed in /proc/self/mountinfo; the answer
 *    is cached per device);  anything else goes to the real splice().
 *  - fd_out must be a pipe (as the kernel requires when fd_in is not);
 *    off_out must be NULL (ESPIPE).  off_in, when given, is honoured with
 *    pread() and advanced.
 *  - One read() of at most len bytes, and never more than the pipe can take
 *    right now (rounded down to whole 4096-byte pages when at least a page
 *    fits), so nothing read is ever lost: trace_pipe_raw hands out as
 *    many whole pages as one read asks for (up to 16 for trace-cmd's
 *    64 KiB splices: one FUSE round trip instead of 16), and each lands in
 *    the pipe whole.
 *  - O_NONBLOCK on fd_in: the read() itself fails with EAGAIN when the
 *    file has nothing to read, like the kernel's splice of an empty
 *    trace_pipe_raw (and takes whole pages at once, whatever buffer_percent
 *    says, as that splice does).  SPLICE_F_NONBLOCK on a blocking fd_in: a
 *    read() cannot carry it, so the wrapper asks poll() with a zero timeout
 *    first and fails with EAGAIN when poll says not readable (for
 *    trace_pipe_raw: below buffer_percent).  Blocking mode blocks in read(),
 *    where a signal gives EINTR.  A full pipe gives EAGAIN with SPLICE_F_NONBLOCK and otherwise
 *    waits for room.
 *  - The return value is what the real splice returns: bytes moved, 0 at end
 *    of file, or -1 with errno.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <limits.h>
#include <unistd.h>

#define FUSE_SUPER_MAGIC 0x65735546
#define PAGE 4096
#define MAX_CHUNK (1 << 20)
#define NDEV 32

typedef ssize_t (*splice_fn)(int, loff_t *, int, loff_t *, size_t, unsigned int);

static splice_fn real_splice;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct { dev_t dev; int fake; } devs[NDEV];
static int ndevs;

/* Is device `dev` (of the file open at fd) a fuse.fakedebugfs mount? */
static int mountinfo_says_fake(dev_t dev)
{
	char line[4096];
	FILE *fp = fopen("/proc/self/mountinfo", "re");
	int found = -1;

	if (!fp)
		return -1;
	while (fgets(line, sizeof(line), fp)) {
		unsigned int maj, min;
		char *sep;

		/* id parent major:minor root mountpoint options [optional...] - fstype ... */
		if (sscanf(line, "%*d %*d %u:%u", &maj, &min) != 2)
			continue;
		if (makedev(maj, min) != dev)
			continue;
		sep = strstr(line, " - ");
		if (!sep)
			continue;
		found = strncmp(sep + 3, "fuse.fakedebugfs ", 17) == 0;
		if (found)
			break;
	}
	fclose(fp);
	return found;
}

/* fstatfs() without the statfs wrappers below (the file system's real magic) */
static int raw_fstatfs(int fd, struct statfs *buf)
{
	return (int)syscall(SYS_fstatfs, fd, buf);
}

static int is_fake_file(int fd)
{
	struct stat st;
	struct statfs sfs;
	int i, fake;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return 0;
	pthread_mutex_lock(&lock);
	for (i = 0; i < ndevs; i++) {
		if (devs[i].dev == st.st_dev) {
			fake = devs[i].fake;
			pthread_mutex_unlock(&lock);
			return fake;
		}
	}
	pthread_mutex_unlock(&lock);

	fake = 0;
	if (raw_fstatfs(fd, &sfs) == 0 && sfs.f_type == FUSE_SUPER_MAGIC) {
		/* any FUSE file when mountinfo cannot tell (-1) */
		fake = mountinfo_says_fake(st.st_dev) != 0;
	}
	pthread_mutex_lock(&lock);
	if (ndevs < NDEV) {
		devs[ndevs].dev = st.st_dev;
		devs[ndevs].fake = fake;
		ndevs++;
	}
	pthread_mutex_unlock(&lock);
	return fake;
}

/* Room in pipe fd now, in bytes (page-granular estimate). */
static ssize_t pipe_room(int fd)
{
	int cap = fcntl(fd, F_GETPIPE_SZ);
	int used = 0;

	if (cap < 0)
		return -1;
	if (ioctl(fd, FIONREAD, &used) < 0)
		used = 0;
	/* pipe slots hold at most a page each: count partly used ones as full */
	used = (used + PAGE - 1) / PAGE * PAGE;
	return cap > used ? cap - used : 0;
}

static int write_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(fd, buf, n);

		if (w > 0) {
			buf += w;
			n -= w;
		} else if (w < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			poll(&p, 1, -1);
		} else if (w < 0 && errno != EINTR) {
			return -1;
		}
	}
	return 0;
}

static ssize_t fake_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out,
			   size_t len, unsigned int flags)
{
	struct stat so;
	ssize_t room, r;
	size_t want;
	char *buf;
	int nonblock, saved, in_flags;

	if (fstat(fd_out, &so) < 0)
		return -1;
	if (!S_ISFIFO(so.st_mode)) {
		errno = EINVAL;
		return -1;
	}
	if (off_out) {
		errno = ESPIPE;
		return -1;
	}
	if (len == 0)
		return 0;
	in_flags = fcntl(fd_in, F_GETFL);
	nonblock = (flags & SPLICE_F_NONBLOCK) || (in_flags & O_NONBLOCK);

	for (;;) {
		room = pipe_room(fd_out);
		if (room < 0)
			return -1;
		if (room > 0)
			break;
		if (flags & SPLICE_F_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = { .fd = fd_out, .events = POLLOUT };

		if (poll(&p, 1, -1) < 0)
			return -1;
	}
	want = len < (size_t)room ? len : (size_t)room;
	if (want > MAX_CHUNK)
		want = MAX_CHUNK;
	if (want >= PAGE)
		want &= ~(size_t)(PAGE - 1);

	/*
	 * A nonblocking fd_in is read as it is: its read() fails with EAGAIN
	 * when nothing waits.  poll() would not do here: it follows
	 * buffer_percent (trace_poll), while the kernel's nonblocking splice
	 * takes any whole page at once; a reader that asked poll first kept
	 * the buffer half full (50%: the default) and lost events to
	 * overwrite under a burst where the kernel loses none.  Only
	 * SPLICE_F_NONBLOCK on a blocking fd_in still asks poll (a read of it
	 * would block).
	 */
	if (nonblock && !(in_flags & O_NONBLOCK)) {
		struct pollfd p = { .fd = fd_in, .events = POLLIN };
		int n = poll(&p, 1, 0);

		if (n < 0)
			return -1;
		if (n == 0 || !(p.revents & (POLLIN | POLLRDNORM | POLLHUP | POLLERR))) {
			errno = EAGAIN;
			return -1;
		}
	}

	buf = malloc(want);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	if (off_in) {
		r = pread(fd_in, buf, want, *off_in);
		if (r > 0)
			*off_in += r;
	} else {
		r = read(fd_in, buf, want);
	}
	if (r > 0 && write_all(fd_out, buf, r) < 0) {
		/* data already taken from the source: report what the pipe lost */
		saved = errno;
		free(buf);
		errno = saved;
		return -1;
	}
	saved = errno;
	free(buf);
	errno = saved;
	return r;
}

/* FAKEDEBUGFS_NO_SPLICE_PRELOAD=1 turns the emulation off (to compare) */
static int disabled(void)
{
	const char *v = getenv("FAKEDEBUGFS_NO_SPLICE_PRELOAD");

	return v && *v && strcmp(v, "0") != 0;
}

ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
	       unsigned int flags)
{
	if (!real_splice) {
		real_splice = (splice_fn)dlsym(RTLD_NEXT, "splice");
		if (!real_splice) {
			errno = ENOSYS;
			return -1;
		}
	}
	if (!disabled() && is_fake_file(fd_in))
		return fake_splice(fd_in, off_in, fd_out, off_out, len, flags);
	return real_splice(fd_in, off_in, fd_out, off_out, len, flags);
}

/*
 * statfs()/fstatfs() on the fake report the magic of the file system it
 * stands for (include/uapi/linux/magic.h): TRACEFS_MAGIC for a tracing
 * directory (/sys/kernel/tracing, debug/tracing, a mount's tracing/),
 * DEBUGFS_MAGIC for the rest, as tools that check (powertop, stress-ng,
 * libtracefs' test_dir) expect; they would otherwise see FUSE and mount
 * the real debugfs over the fake.  Only fuse.fakedebugfs mounts are changed.
 */
#define DEBUGFS_MAGIC 0x64626720
#define TRACEFS_MAGIC 0x74726163

typedef int (*statfs_fn)(const char *, struct statfs *);
typedef int (*fstatfs_fn)(int, struct statfs *);

static int is_tracing_path(const char *p)
{
	size_t n = strlen(p);

	if (!strncmp(p, "/sys/kernel/tracing", 19) && (p[19] == '\0' || p[19] == '/'))
		return 1;
	return strstr(p, "/tracing/") != NULL || (n >= 8 && !strcmp(p + n - 8, "/tracing"));
}

/* buf came from the real call on path (or fd when path is NULL) */
static void fake_magic(struct statfs *buf, const char *path, int fd)
{
	char where[PATH_MAX], link[64];
	struct stat st;
	ssize_t n;

	if (buf->f_type != FUSE_SUPER_MAGIC || getenv("FAKEDEBUGFS_NO_STATFS_MAGIC"))
		return;
	if ((path ? stat(path, &st) : fstat(fd, &st)) < 0 || mountinfo_says_fake(st.st_dev) != 1)
		return;
	if (path) {
		if (!realpath(path, where))
			return;
	} else {
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, where, sizeof(where) - 1);
		if (n < 0)
			return;
		where[n] = '\0';
	}
	buf->f_type = is_tracing_path(where) ? TRACEFS_MAGIC : DEBUGFS_MAGIC;
}

int statfs(const char *path, struct statfs *buf)
{
	static statfs_fn real;
	int r;

	if (!real)
		real = (statfs_fn)dlsym(RTLD_NEXT, "statfs");
	r = real ? real(path, buf) : (int)syscall(SYS_statfs, path, buf);
	if (r == 0)
		fake_magic(buf, path, -1);
	return r;
}

int fstatfs(int fd, struct statfs *buf)
{
	int r = raw_fstatfs(fd, buf);

	if (r == 0)
		fake_magic(buf, NULL, fd);
	return r;
}

int statfs64(const char *path, struct statfs64 *buf)
{
	return statfs(path, (struct statfs *)buf);
}

int fstatfs64(int fd, struct statfs64 *buf)
{
	return fstatfs(fd, (struct statfs *)buf);
}

/*
 * mount(2) remounting a fake as tracefs: `mount -t tracefs -o remount,gid=N
 * nodev DIR` (ftracetest's 00basic/mount_options.tc).  Given `-t tracefs`,
 * libmount makes the mount(2) call itself instead of running mount.fuse3,
 * and the fake is a FUSE mount (and `run`'s seal refuses the call).  When
 * DIR is a fuse.fakedebugfs mount, the remount goes where mount.fuse3 sends
 * `mount -o remount,...` of the fake: `fakedebugfs SOURCE DIR -o OPTIONS`,
 * found on the PATH mount(8) gives its helpers, whose uid=/gid= change the
 * fake's ownership as tracefs_reconfigure changes tracefs'.  Every other
 * mount(2) call goes to the real one.
 */
#include <sys/mount.h>
#include <sys/wait.h>

#define HELPER_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

typedef int (*mount_fn)(const char *, const char *, const char *, unsigned long, const void *);

static int is_fake_dir(const char *path)
{
	struct stat st;
	struct statfs sfs;

	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	if (syscall(SYS_statfs, path, &sfs) < 0 || sfs.f_type != FUSE_SUPER_MAGIC)
		return 0;
	return mountinfo_says_fake(st.st_dev) == 1;
}

static int remount_fake(const char *source, const char *target, const char *data)
{
	size_t n = strlen("remount") + (data ? strlen(data) + 1 : 0) + 1;
	char *opts = malloc(n);
	int status;
	pid_t pid;

	if (!opts) {
		errno = ENOMEM;
		return -1;
	}
	snprintf(opts, n, "remount%s%s", data && *data ? "," : "", data ? data : "");
	pid = fork();
	if (pid == 0) {
		char *argv[] = { "fakedebugfs", (char *)(source ? source : "none"),
				 (char *)target, "-o", opts, NULL };

		unsetenv("LD_PRELOAD");
		setenv("PATH", HELPER_PATH, 1);
		execvp("fakedebugfs", argv);
		_exit(127);
	}
	free(opts);
	if (pid < 0)
		return -1;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	errno = EINVAL;  /* the helper said why on stderr, as tracefs' parser logs */
	return -1;
}

int mount(const char *source, const char *target, const char *fstype,
	  unsigned long flags, const void *data)
{
	static mount_fn real_mount;

	if (!real_mount) {
		real_mount = (mount_fn)dlsym(RTLD_NEXT, "mount");
		if (!real_mount) {
			errno = ENOSYS;
			return -1;
		}
	}
	if ((flags & MS_REMOUNT) && !(flags & MS_BIND) && fstype && !strcmp(fstype, "tracefs")
	    && target && is_fake_dir(target))
		return remount_fake(source, target, (const char *)data);
	return real_mount(source, target, fstype, flags, data);
}
