/* Counts the SIGINTs it is delivered: prints "ready" once its signals are
   set, "int N from PID" at each SIGINT (its sender's pid as this process
   sees it: 0 for the kernel's or one from outside its PID namespace), and
   "total N" at SIGTERM, then exits 0.  Standard signals coalesce while
   pending, so a sender waits for each "int N" before the next. */
#include <signal.h>
#include <stdio.h>

int main(void)
{
    sigset_t set;
    int n = 0;

    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig == SIGINT) {
            printf("int %d from %d\n", ++n, (int)info.si_pid);
            fflush(stdout);
        } else if (sig == SIGTERM) {
            printf("total %d\n", n);
            fflush(stdout);
            return 0;
        }
    }
}
