/*
 * The kernel-copy floor of a large shared-memory alltoall, no MPI: P forked
 * processes exchange blocks of B bytes (every rank sends block j of its send
 * buffer to rank j), ITERS times, with a yielding sense-reversing barrier
 * before and after each exchange (the end barrier keeps send buffers stable
 * until every reader is done, as a collective must). Two ways to move a block:
 *
 *   cma       every rank reads its block from each peer's send buffer with
 *             process_vm_readv (what tmpi's sm single copy and Open MPI's
 *             vader CMA both do)
 *   vmsplice  every rank splices its blocks into one pipe per peer (1 MiB
 *             capacity: B up to 1 MiB) and each reader read()s its pipes
 *
 * Per iteration it records when each rank started and finished its copies and
 * prints two medians: rank 0's window (start barrier left to end barrier
 * left: what a benchmark timing one rank sees) and the span from the first
 * rank's start to the last rank's end (the whole exchange). docs/coll.md,
 * "Why these limits", quotes it: at 8 ranks of 1 MiB on 2 cores the span is
 * ~5 ms for both methods while rank 0's window reads 1.1-5 ms depending on
 * where the scheduler runs it.
 *
 *   gcc -O2 -o alltoall_copy_floor perf/c/alltoall_copy_floor.c
 *   ./alltoall_copy_floor P B cma|vmsplice [ITERS]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXP 16
#define MAXIT 2000

struct shared {
    _Atomic int count;
    _Atomic int sense;
    pid_t pid[MAXP];
    char *send[MAXP];
    double start[MAXIT][MAXP];
    double end[MAXIT][MAXP];
    double window[MAXIT];
};

static struct shared *sh;
static int nranks;

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void barrier(int *sense) {
    *sense = !*sense;
    if (atomic_fetch_add(&sh->count, 1) == nranks - 1) {
        atomic_store(&sh->count, 0);
        atomic_store(&sh->sense, *sense);
    } else {
        while (atomic_load(&sh->sense) != *sense) sched_yield();
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s P B cma|vmsplice [ITERS]\n", argv[0]);
        return 2;
    }
    nranks = atoi(argv[1]);
    size_t block = strtoull(argv[2], NULL, 0);
    int splice = strcmp(argv[3], "vmsplice") == 0;
    int iters = argc > 4 ? atoi(argv[4]) : 200;
    if (nranks < 2 || nranks > MAXP || iters < 1 || iters > MAXIT || block == 0 ||
        (splice && block > (1 << 20))) {
        fprintf(stderr, "P in 2..%d, ITERS in 1..%d, B > 0 (vmsplice: B <= 1 MiB)\n", MAXP, MAXIT);
        return 2;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) die("mmap");
    static int rd[MAXP][MAXP], wr[MAXP][MAXP];
    if (splice)
        for (int i = 0; i < nranks; i++)
            for (int j = 0; j < nranks; j++) {
                int p[2];
                if (i == j) continue;
                if (pipe(p) != 0) die("pipe");
                if (fcntl(p[1], F_SETPIPE_SZ, 1 << 20) < 0) die("F_SETPIPE_SZ");
                rd[i][j] = p[0];
                wr[i][j] = p[1];
            }
    for (int me = 0; me < nranks; me++) {
        pid_t pid = fork();
        if (pid < 0) die("fork");
        if (pid) continue;
        char *send = aligned_alloc(4096, block * nranks), *recv = aligned_alloc(4096, block * nranks);
        if (!send || !recv) die("aligned_alloc");
        for (int j = 0; j < nranks; j++) memset(send + j * block, me * nranks + j, block);
        memset(recv, 0xff, block * nranks);
        sh->pid[me] = getpid();
        sh->send[me] = send;
        int sense = 0;
        barrier(&sense);
        for (int it = 0; it < iters; it++) {
            barrier(&sense);
            double t0 = now_us();
            sh->start[it][me] = t0;
            if (splice) {
                for (int k = 1; k < nranks; k++) {
                    int j = (me + k) % nranks;
                    for (size_t off = 0; off < block;) {
                        struct iovec v = {send + j * block + off, block - off};
                        ssize_t n = vmsplice(wr[me][j], &v, 1, 0);
                        if (n < 0) die("vmsplice");
                        off += n;
                    }
                }
                for (int k = 1; k < nranks; k++) {
                    int j = (me - k + nranks) % nranks;
                    for (size_t off = 0; off < block;) {
                        ssize_t n = read(rd[j][me], recv + j * block + off, block - off);
                        if (n <= 0) die("read");
                        off += n;
                    }
                }
            } else {
                for (int k = 1; k < nranks; k++) {
                    int j = (me + k) % nranks;
                    struct iovec local = {recv + j * block, block};
                    struct iovec remote = {sh->send[j] + me * block, block};
                    if (process_vm_readv(sh->pid[j], &local, 1, &remote, 1, 0) != (ssize_t)block)
                        die("process_vm_readv");
                }
            }
            memcpy(recv + me * block, send + me * block, block);
            sh->end[it][me] = now_us();
            barrier(&sense);
            if (me == 0) sh->window[it] = now_us() - t0;
        }
        for (int j = 0; j < nranks; j++) {
            unsigned char want = (unsigned char)(j * nranks + me);
            if ((unsigned char)recv[j * block] != want || (unsigned char)recv[j * block + block - 1] != want) {
                fprintf(stderr, "rank %d: wrong data from %d\n", me, j);
                exit(3);
            }
        }
        exit(0);
    }
    int failed = 0;
    for (int i = 0; i < nranks; i++) {
        int status;
        if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    }
    if (failed) {
        fprintf(stderr, "a rank failed\n");
        return 1;
    }
    static double span[MAXIT];
    for (int it = 0; it < iters; it++) {
        double first = 1e300, last = 0;
        for (int r = 0; r < nranks; r++) {
            if (sh->start[it][r] < first) first = sh->start[it][r];
            if (sh->end[it][r] > last) last = sh->end[it][r];
        }
        span[it] = last - first;
    }
    qsort(sh->window, iters, sizeof(double), cmp);
    qsort(span, iters, sizeof(double), cmp);
    printf("P=%d B=%zu %s: rank 0 window median %.1f us (min %.1f, max %.1f), span median %.1f us (min %.1f)\n",
           nranks, block, splice ? "vmsplice" : "cma", sh->window[iters / 2], sh->window[0],
           sh->window[iters - 1], span[iters / 2], span[0]);
    return 0;
}
