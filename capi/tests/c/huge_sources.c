/* Single-copy sources on huge pages (coll_sm_huge_after, btl_sm_huge_after):
 * every rank sends 2 MiB blocks with MPI_Alltoall from the same malloc'd
 * vector in six rounds, then an 8 MiB message to the next rank (btl-sm's
 * rendezvous, read by the receiver with process_vm_readv) from another
 * buffer in six rounds, changing the contents between rounds and checking
 * everything received. Rank 0 prints the smallest AnonHugePages (kB) of
 * any rank's process after each phase (the test compares them with the
 * parameters): with the defaults (4), each source went onto huge pages in
 * its fourth round while the other processes read it before and after. */
#include "check.h"

#define BLOCK (2 << 20)

static long anon_huge_kb(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

static unsigned char val(int from, int to, size_t i, int round) {
    return (unsigned char)(from * 31 + to * 7 + i * 13 + round * 101);
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    size_t n = (size_t)BLOCK * size;
    unsigned char *send = malloc(n), *recv = malloc(n);
    CHECK(send && recv);
    for (int round = 0; round < 6; round++) {
        for (int to = 0; to < size; to++)
            for (size_t i = 0; i < BLOCK; i++) send[(size_t)to * BLOCK + i] = val(rank, to, i, round);
        memset(recv, 0xee, n);
        OK(MPI_Alltoall(send, BLOCK, MPI_BYTE, recv, BLOCK, MPI_BYTE, MPI_COMM_WORLD));
        for (int from = 0; from < size; from++)
            for (size_t i = 0; i < BLOCK; i++)
                CHECK(recv[(size_t)from * BLOCK + i] == val(from, rank, i, round));
    }
    long kb = anon_huge_kb(), least;
    OK(MPI_Allreduce(&kb, &least, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD));
    if (rank == 0) printf("huge pages: %ld kB\n", least);
    free(recv);
    /* Point to point: 8 MiB around the ring, the same source each round. */
    size_t m = (size_t)8 << 20;
    unsigned char *msg = malloc(m), *in = malloc(m);
    CHECK(msg && in);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int round = 0; round < 6; round++) {
        for (size_t i = 0; i < m; i++) msg[i] = val(rank, next, i, round);
        memset(in, 0xee, m);
        OK(MPI_Sendrecv(msg, (int)m, MPI_BYTE, next, round, in, (int)m, MPI_BYTE, prev, round,
                        MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (size_t i = 0; i < m; i++) CHECK(in[i] == val(prev, rank, i, round));
    }
    long more = anon_huge_kb() - kb;
    OK(MPI_Allreduce(&more, &least, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD));
    if (rank == 0) printf("huge pages by sends: %ld kB\n", least);
    free(send);
    free(msg);
    free(in);
    report_ok("huge_sources");
    OK(MPI_Finalize());
    return 0;
}
