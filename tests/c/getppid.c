/* getppid N: print this process's pid, then call getppid(2) N times (the
 * system call itself, not glibc's: one sys_enter_getppid each; default 1).
 * The mirror tests' workload: its entries are counted by its pid. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1;

	printf("%d\n", getpid());
	fflush(stdout);
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	return 0;
}
