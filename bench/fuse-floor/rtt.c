/* One FUSE round trip, timed from the caller: N fgetxattr(2) calls of one name on one open
 * file, which the FUSE kernel module never caches, so each is a GETXATTR request to the
 * daemon (a kernel filesystem answers it itself: the same loop there is the syscall's own
 * cost, to subtract).
 *
 *   rtt FILE NAME N   → "wall_ns_per_call user_ns_per_call sys_ns_per_call errno"
 *
 * errno is that of the last call (ENODATA or EOPNOTSUPP expected: nothing is returned, so
 * the daemon's reply is a bare header). The caller's user/sys CPU come from getrusage. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

static double ns(struct timespec t) { return t.tv_sec * 1e9 + t.tv_nsec; }
static double tv_ns(struct timeval t) { return t.tv_sec * 1e9 + t.tv_usec * 1e3; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: rtt FILE NAME N\n");
        return 2;
    }
    long n = atol(argv[3]);
    if (n <= 0) {
        fprintf(stderr, "rtt: N must be a positive count, got '%s'\n", argv[3]);
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    char buf[256];
    int err = 0;
    for (long i = 0; i < n / 10 + 1; i++) /* warm-up: caches, CPU frequency, ring threads */
        if (fgetxattr(fd, argv[2], buf, sizeof buf) < 0) err = errno;
    struct rusage r0, r1;
    struct timespec t0, t1;
    getrusage(RUSAGE_SELF, &r0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++)
        if (fgetxattr(fd, argv[2], buf, sizeof buf) < 0) err = errno;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    getrusage(RUSAGE_SELF, &r1);
    printf("%.0f %.0f %.0f %d\n", (ns(t1) - ns(t0)) / n, (tv_ns(r1.ru_utime) - tv_ns(r0.ru_utime)) / n,
           (tv_ns(r1.ru_stime) - tv_ns(r0.ru_stime)) / n, err);
    return 0;
}
