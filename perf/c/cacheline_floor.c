/*
 * The hardware floor of a shared-memory ping-pong: two processes pinned to
 * cores 0 and 1 pass one 64-byte line back and forth (a sequence word and
 * 8 bytes of data, as a fast-box record of an 8-byte message), no MPI.
 * Prints the one-way time of RUNS runs (default 5) of ROUNDTRIPS round trips
 * (default 2 000 000). The benchmark report runs it briefly around each
 * 2-rank job as a placement probe (`cacheline_floor 20000 1`): on a shared
 * host the two vCPUs move between physical placements whose floor differs
 * several-fold (docs/report/notes.md).
 *
 *   gcc -O2 -o cacheline_floor perf/c/cacheline_floor.c && ./cacheline_floor
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct line {
    volatile uint64_t seq;
    volatile uint64_t data;
    char pad[48];
} __attribute__((aligned(64)));


static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

int main(int argc, char **argv) {
    uint64_t N = argc > 1 ? strtoull(argv[1], 0, 10) : 2000000;
    int runs = argc > 2 ? atoi(argv[2]) : 5;
    if (N == 0 || runs <= 0) {
        fprintf(stderr, "usage: cacheline_floor [ROUNDTRIPS [RUNS]]\n");
        return 2;
    }
    char *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 1;
    struct line *a2b = (struct line *)m, *b2a = (struct line *)(m + 128);
    for (int r = 0; r < runs; r++) {
        a2b->seq = 0;
        b2a->seq = 0;
        /* The child starts on core 1: under a real-time policy a child
         * queued on the parent's core would never run. */
        pin(1);
        pid_t p = fork();
        if (p == 0) {
            pin(1);
            for (uint64_t i = 1; i <= N; i++) {
                while (a2b->seq != i) {
                }
                b2a->data = a2b->data;
                __atomic_store_n(&b2a->seq, i, __ATOMIC_RELEASE);
            }
            _exit(0);
        }
        pin(0);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (uint64_t i = 1; i <= N; i++) {
            a2b->data = i;
            __atomic_store_n(&a2b->seq, i, __ATOMIC_RELEASE);
            while (b2a->seq != i) {
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        waitpid(p, 0, 0);
        double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
        printf("one-way %.1f ns\n", ns / (double)N / 2);
    }
    return 0;
}
