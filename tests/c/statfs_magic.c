/* statfs_magic PATH...: the f_type of statfs(PATH) and of fstatfs() on PATH
 * opened O_RDONLY, one "PATH statfs fstatfs" line each, in hex. */
#include <fcntl.h>
#include <stdio.h>
#include <sys/vfs.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		struct statfs a, b;
		int fd = open(argv[i], O_RDONLY);

		if (statfs(argv[i], &a) < 0 || fd < 0 || fstatfs(fd, &b) < 0) {
			perror(argv[i]);
			return 1;
		}
		printf("%s %lx %lx\n", argv[i], (unsigned long)a.f_type, (unsigned long)b.f_type);
		close(fd);
	}
	return 0;
}
