/*
 * The lean way into a fake's `run` namespace: what Fake.popen starts once
 * the fake's keeper (fakedebugfs/sandbox/keeper.py) holds that namespace.
 *
 *   join (--pidfd N | --wait-fd R) --info PATH --status FD
 *        --fallback ARGV... --end-fallback -- COMMAND...
 *
 * PATH, written by the keeper once it holds the namespace, holds
 * "PID USERNS FILTER" (the holder, whether to enter its user namespace,
 * the seal in hex), then NAME=VALUE lines: the environment's additions.
 * N is the holder's pidfd, which the fake keeps.  A command started while
 * the keeper is still making the namespace gets --wait-fd instead: it
 * waits for EOF on R (the keeper closes the pipe's only write end once the
 * namespace is held, or when it fails), then opens the holder's pidfd
 * itself, and makes sure that process is in another PID namespace than
 * ours (a pid reused by a host process would not be).
 *
 * It remembers its working directory, enters the namespaces of the holder
 * whose pidfd it is given with one setns(2) (CLONE_NEWUSER when rootless,
 * CLONE_NEWNS, CLONE_NEWPID: the kernel enters the user namespace first),
 * goes back to its working directory by name (setns of a mount namespace
 * resets the root and the working directory) and forks COMMAND, which
 *
 *  - dies with this launcher (PR_SET_PDEATHSIG, as `run`'s command dies
 *    with `run`);
 *  - is sealed with the filter fakedebugfs/sandbox/seal.py assembled
 *    (PR_SET_NO_NEW_PRIVS, then seccomp(SECCOMP_SET_MODE_FILTER)): if the
 *    seal fails, it does not start;
 *  - gets `run`'s environment additions (LD_PRELOAD appended to, the
 *    others set).
 *
 * The launcher forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT to COMMAND (not
 * those the kernel sent for a terminal to the whole group, which COMMAND got
 * too) and exits with its status (128 + N when signal N killed it), as
 * `run` does; "fakedebugfs run: ..." and 127/126 (like a shell) when
 * COMMAND cannot start.  When the namespace cannot be entered (setns
 * refused by a container, the holder gone, the working directory not
 * reachable there), it writes why on the --status fd and execs the
 * --fallback command line (`fakedebugfs run --attach MNT -- COMMAND`): the
 * command still runs, the slow way, and the fake logs why.
 *
 * C rather than Python: Python's start and imports (ctypes, the signals)
 * were 25 of the 34 ms a joined `true` took.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLONE_NEWUSER
#define CLONE_NEWUSER 0x10000000
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static int usage(void)
{
	fputs("fakedebugfs run: join: bad arguments\n", stderr);
	return 2;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The filter's instructions (struct sock_filter, include/uapi/linux/filter.h) from hex. */
static struct sock_filter *parse_filter(const char *hex, unsigned short *count)
{
	size_t n = strlen(hex);
	if (n == 0 || n % (2 * sizeof(struct sock_filter)) != 0)
		return NULL;
	unsigned char *buf = malloc(n / 2);
	if (!buf)
		return NULL;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(buf);
			return NULL;
		}
		buf[i] = (unsigned char)(hi << 4 | lo);
	}
	*count = (unsigned short)(n / 2 / sizeof(struct sock_filter));
	return (struct sock_filter *)buf;
}

static void add_env(const char *pair)
{
	const char *eq = strchr(pair, '=');
	if (!eq)
		return;
	char *name = strndup(pair, (size_t)(eq - pair));
	const char *value = eq + 1;
	if (name && strcmp(name, "LD_PRELOAD") == 0) {
		/* appended, as run's command_env does (an empty or blank one replaced) */
		const char *old = getenv("LD_PRELOAD");
		while (old && (*old == ' ' || *old == '\t' || *old == '\n'))
			old++;
		if (old && *old) {
			size_t len = strlen(old);
			while (len && (old[len - 1] == ' ' || old[len - 1] == '\t' || old[len - 1] == '\n'))
				len--;
			char *joined = malloc(len + strlen(value) + 2);
			if (joined) {
				memcpy(joined, old, len);
				joined[len] = ':';
				strcpy(joined + len + 1, value);
				setenv(name, joined, 1);
				free(joined);
				free(name);
				return;
			}
		}
	}
	if (name)
		setenv(name, value, 1);
	free(name);
}

/* The --info file: the holder's pidfd (opened here unless --pidfd gave
 * it), its seal, its environment; 0, or -1 with errno (ESRCH: no holder to
 * join). */
static int read_info(const char *path, int *pidfd, int *userns, char **filter_hex)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	if (!f)
		return -1;
	if ((len = getline(&line, &cap, f)) <= 0) {
		fclose(f);
		errno = ESRCH;
		return -1;
	}
	int pid = 0, user = 0;
	char *hex = malloc((size_t)len + 1);
	if (!hex || sscanf(line, "%d %d %s", &pid, &user, hex) != 3 || pid <= 0) {
		free(hex);
		fclose(f);
		errno = EINVAL;
		return -1;
	}
	while ((len = getline(&line, &cap, f)) > 0) {
		if (line[len - 1] == '\n')
			line[len - 1] = '\0';
		add_env(line);
	}
	free(line);
	fclose(f);
	*userns = user;
	*filter_hex = hex;
	if (*pidfd >= 0) /* the fake's: it is the holder */
		return 0;
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0) {
		free(hex);
		return -1;
	}
	char theirs[64];
	struct stat a, b;
	snprintf(theirs, sizeof theirs, "/proc/%d/ns/pid", pid);
	if (stat("/proc/self/ns/pid", &a) != 0 || stat(theirs, &b) != 0
	    || (a.st_dev == b.st_dev && a.st_ino == b.st_ino)) {
		close(fd);
		free(hex);
		errno = ESRCH;
		return -1;
	}
	*pidfd = fd;
	return 0;
}

static void say_status(int fd, const char *what, int err)
{
	char msg[512];
	int n = snprintf(msg, sizeof msg, "cannot join the fake's namespace (%s: %s)", what,
			 strerror(err));
	if (fd >= 0 && n > 0 && write(fd, msg, (size_t)n) < 0) {
		/* the fake is gone: nothing to tell */
	}
}

/* Report an error of the child through the close-on-exec pipe *w* and exit. */
static void child_fail(int w, const char *what, int err, int status)
{
	char msg[256];
	int n = snprintf(msg, sizeof msg, "%s %d", what, err);
	if (n > 0 && write(w, msg, (size_t)n) < 0) {
		/* the launcher is gone */
	}
	_exit(status);
}

/* execvp() without its /bin/sh retry of a file without an interpreter line
 * (ENOEXEC): as Python's os.execvpe, which `run` uses; the errno it failed with. */
static int exec_path(char **command)
{
	const char *name = command[0];
	if (strchr(name, '/')) {
		execv(name, command);
		return errno;
	}
	const char *path = getenv("PATH");
	if (!path)
		path = "/bin:/usr/bin"; /* os.defpath */
	int saved = 0, last = ENOENT;
	size_t len = strlen(name);
	char *buf = malloc(strlen(path) + len + 2);
	if (!buf)
		return ENOMEM;
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dir = (size_t)(end - p);
		if (dir == 0) {
			memcpy(buf, name, len + 1); /* an empty entry: the working directory */
		} else {
			memcpy(buf, p, dir);
			buf[dir] = '/';
			memcpy(buf + dir + 1, name, len + 1);
		}
		execv(buf, command);
		last = errno;
		if (last != ENOENT && last != ENOTDIR && !saved)
			saved = last;
		if (*end == '\0')
			break;
		p = end;
	}
	free(buf);
	return saved ? saved : last;
}

static int exit_status(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv)
{
	int pidfd = -1, status_fd = -1, userns = 0, wait_fd = -1;
	char *filter_hex = NULL;
	const char *info = NULL;
	char **fallback = NULL, **command = NULL;
	int i;

	for (i = 1; i < argc; i++) {
		char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			command = argv + i + 1;
			break;
		} else if (strcmp(a, "--fallback") == 0) {
			fallback = argv + i + 1;
			while (i < argc && strcmp(argv[i], "--end-fallback") != 0)
				i++;
			if (i == argc)
				return usage();
			argv[i] = NULL; /* the fallback's argv ends here */
		} else if (i + 1 < argc && strcmp(a, "--pidfd") == 0) {
			pidfd = atoi(argv[++i]);
		} else if (i + 1 < argc && strcmp(a, "--wait-fd") == 0) {
			wait_fd = atoi(argv[++i]);
		} else if (i + 1 < argc && strcmp(a, "--info") == 0) {
			info = argv[++i];
		} else if (i + 1 < argc && strcmp(a, "--status") == 0) {
			status_fd = atoi(argv[++i]);
		} else {
			return usage();
		}
	}
	if (!info || (pidfd < 0 && wait_fd < 0) || !command || !command[0] || !fallback
	    || !fallback[0])
		return usage();

	sigset_t watched, none;
	sigemptyset(&watched);
	for (i = 0; i < 4; i++)
		sigaddset(&watched, forwarded[i]);
	sigaddset(&watched, SIGCHLD);
	sigemptyset(&none);
	sigprocmask(SIG_BLOCK, &watched, NULL);

	const char *failed = NULL;
	int err = 0;
	if (pidfd < 0) { /* until the keeper holds the namespace (or gave up) */
		char c;
		for (;;) {
			ssize_t got = read(wait_fd, &c, 1);
			if (got == 0 || (got < 0 && errno != EINTR))
				break;
		}
		close(wait_fd);
	}
	if (read_info(info, &pidfd, &userns, &filter_hex) != 0) {
		failed = "the keeper's holder";
		err = errno;
	}
	struct sock_fprog prog = {0, NULL};
	if (!failed) {
		prog.filter = parse_filter(filter_hex, &prog.len);
		if (!prog.filter)
			return usage();
	}

	/* the namespaces; back to our working directory by its name.  A probe
	 * (a child) tries both first: once we are in, there is no way back to
	 * the fallback's namespaces. */
	int flags = CLONE_NEWNS | CLONE_NEWPID | (userns ? CLONE_NEWUSER : 0);
	char *cwd = failed ? NULL : getcwd(NULL, 0);
	if (failed) {
	} else if (!cwd) {
		failed = "getcwd";
		err = errno;
	} else {
		pid_t probe = fork();
		if (probe == 0) {
			if (setns(pidfd, flags & ~CLONE_NEWPID) != 0)
				_exit(128 | (errno & 0x7f));
			_exit(chdir(cwd) != 0 ? errno & 0x7f : 0);
		}
		int status = 0;
		if (probe < 0) {
			failed = "fork";
			err = errno;
		} else if (waitpid(probe, &status, 0) != probe || !WIFEXITED(status)) {
			failed = "the probe";
			err = ECHILD;
		} else if (WEXITSTATUS(status) & 128) {
			failed = "setns";
			err = WEXITSTATUS(status) & 0x7f;
		} else if (WEXITSTATUS(status) != 0) {
			failed = "chdir";
			err = WEXITSTATUS(status);
		}
	}
	if (!failed && setns(pidfd, flags) != 0) {
		failed = "setns";
		err = errno;
	} else if (!failed && chdir(cwd) != 0) { /* (it was there a moment ago) */
		fprintf(stderr, "fakedebugfs run: %s: %s\n", cwd, strerror(errno));
		return 126;
	}
	if (failed) {
		say_status(status_fd, failed, err);
		close(status_fd);
		if (pidfd >= 0)
			close(pidfd);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execv(fallback[0], fallback);
		fprintf(stderr, "fakedebugfs run: %s: %s\n", fallback[0], strerror(errno));
		return 126;
	}
	free(cwd);
	close(status_fd);
	close(pidfd);

	int errs[2], live[2];
	if (pipe2(errs, O_CLOEXEC) != 0 || pipe2(live, O_CLOEXEC) != 0) {
		fprintf(stderr, "fakedebugfs run: pipe: %s\n", strerror(errno));
		return 1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "fakedebugfs run: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		char c;
		close(errs[0]);
		close(live[1]);
		signal(SIGPIPE, SIG_DFL);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
			child_fail(errs[1], "exec", errno, 127);
		fcntl(live[0], F_SETFL, O_NONBLOCK);
		if (read(live[0], &c, 1) == 0) /* EOF: the launcher died before the prctl */
			_exit(1);
		close(live[0]);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
			child_fail(errs[1], "seal-nnp", errno, 126);
		if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
			child_fail(errs[1], "seal-seccomp", errno, 126);
		child_fail(errs[1], "exec", exec_path(command), 127);
	}
	close(errs[1]);
	close(live[0]);
	char report[256];
	ssize_t got = 0, n;
	while ((n = read(errs[0], report + got, sizeof report - 1 - (size_t)got)) > 0
	       || (n < 0 && errno == EINTR))
		if (n > 0)
			got += n;
	close(errs[0]);
	if (got > 0) {
		int code = 0;
		report[got] = '\0';
		char *space = strchr(report, ' ');
		if (space)
			code = atoi(space + 1);
		waitpid(pid, NULL, 0);
		if (strncmp(report, "seal-", 5) == 0) {
			fprintf(stderr, "fakedebugfs run: cannot seal the command (%s: %s); "
				"--unsealed runs it unsealed\n",
				strncmp(report, "seal-nnp", 8) == 0 ? "prctl(PR_SET_NO_NEW_PRIVS)"
								   : "seccomp(SECCOMP_SET_MODE_FILTER)",
				strerror(code));
			return 126;
		}
		fprintf(stderr, "fakedebugfs run: %s: %s\n", command[0], strerror(code));
		return code == ENOENT ? 127 : 126;
	}

	for (;;) {
		int status;
		pid_t done = waitpid(pid, &status, WNOHANG);
		if (done == pid)
			return exit_status(status);
		if (done < 0 && errno != EINTR)
			return 1;
		siginfo_t info;
		struct timespec second = {1, 0};
		int sig = sigtimedwait(&watched, &info, &second);
		if (sig <= 0 || sig == SIGCHLD || info.si_code == SI_KERNEL)
			continue; /* a terminal's signal reached COMMAND too: it is in our group */
		kill(pid, sig);
	}
}
