/* marker_writer FILE: open FILE, fork; the child writes "child <pid>" and
 * exits; then the parent writes "parent <pid>".  Prints both pids. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char buf[64];
	int fd, n;
	pid_t child;

	if (argc != 2 || (fd = open(argv[1], O_WRONLY)) < 0) {
		perror("open");
		return 1;
	}
	child = fork();
	if (child == 0) {
		n = snprintf(buf, sizeof(buf), "child %d", (int)getpid());
		return write(fd, buf, n) == n ? 0 : 1;
	}
	waitpid(child, NULL, 0);
	n = snprintf(buf, sizeof(buf), "parent %d", (int)getpid());
	if (write(fd, buf, n) != n)
		return 1;
	printf("%d %d\n", (int)getpid(), (int)child);
	return 0;
}
