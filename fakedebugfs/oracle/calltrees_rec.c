/* The system calls whose call trees the fake replays (python -m
 * fakedebugfs.oracle.calltrees): a round of them run twice, the second
 * time traced (this program puts itself into the instance's
 * set_ftrace_pid and set_event_pid after the first).  Static, so that
 * its exec needs no file of the guest's 9p root. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char buf[4096];

static void round_(const char *dir)
{
	char path[256];
	struct stat st;
	struct timespec ts, short_ = {0, 1000000};
	struct epoll_event ev;
	int fut = 0, fds[2];
	long fd = syscall(SYS_openat, AT_FDCWD, "/proc/version", O_RDONLY, 0);
	syscall(SYS_read, fd, buf, sizeof(buf));
	syscall(SYS_close, fd);
	syscall(SYS_write, 1, "x\n", 2);
	void *p = (void *)syscall(SYS_mmap, 0, 65536, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	((char *)p)[0] = 1;
	syscall(SYS_munmap, p, 65536);
	syscall(SYS_brk, 0);
	syscall(SYS_futex, &fut, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
	syscall(SYS_newfstatat, AT_FDCWD, dir, &st, 0);
	syscall(SYS_getpid);
	syscall(SYS_getppid);
	int ep = epoll_create1(0);
	syscall(SYS_epoll_wait, ep, &ev, 1, 0);
	close(ep);
	snprintf(path, sizeof(path), "%s/d", dir);
	syscall(SYS_mkdir, path, 0755);
	syscall(SYS_rmdir, path);
	syscall(SYS_pipe2, fds, 0);
	syscall(SYS_lseek, 0, 0, SEEK_CUR);
	syscall(SYS_nanosleep, &short_, 0);
	close(fds[0]);
	close(fds[1]);
	pid_t c = fork();
	if (!c) {
		snprintf(path, sizeof(path), "%s/rec", dir);
		execl(path, "rec", (char *)0);  /* a static binary on tmpfs: returns at once */
		_exit(1);
	}
	waitpid(c, 0, 0);
}

static void put(const char *file, const char *text)
{
	int fd = open(file, O_WRONLY | O_APPEND);
	if (fd < 0 || write(fd, text, strlen(text)) < 0) {
		perror(file);
		exit(1);
	}
	/* left open: the first close(2) traced is the round's own */
}

int main(int argc, char **argv)
{
	char pid[32], file[512];
	if (argc < 3)  /* exec'd by a round */
		return 0;
	round_(argv[2]);
	snprintf(pid, sizeof(pid), "%d\n", getpid());
	snprintf(file, sizeof(file), "%s/set_ftrace_pid", argv[1]);
	put(file, pid);
	snprintf(file, sizeof(file), "%s/set_event_pid", argv[1]);
	put(file, pid);
	round_(argv[2]);
	return 0;
}
