/* Predefined reductions on MPI_CHAR (as C char integers, what Open MPI
 * and MPICH do and benchmarks rely on): MPI_SUM, MPI_MAX, MPI_MIN and
 * MPI_BOR in MPI_Allreduce, MPI_Reduce and MPI_Reduce_local. Ranks 1-4. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    enum { N = 5 };
    char in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (char)(rank + i);

    OK(MPI_Allreduce(in, out, N, MPI_CHAR, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == (char)(size * (size - 1) / 2 + size * i));
    OK(MPI_Allreduce(in, out, N, MPI_CHAR, MPI_MAX, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == (char)(size - 1 + i));
    OK(MPI_Allreduce(in, out, N, MPI_CHAR, MPI_MIN, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(out[i] == (char)i);
    char bit = (char)(1 << (rank % 7)), bits = 0, want = 0;
    for (int r = 0; r < size; r++) want |= (char)(1 << (r % 7));
    OK(MPI_Allreduce(&bit, &bits, 1, MPI_CHAR, MPI_BOR, MPI_COMM_WORLD));
    CHECK(bits == want);

    for (int i = 0; i < N; i++) out[i] = -1;
    OK(MPI_Reduce(in, out, N, MPI_CHAR, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int i = 0; i < N; i++) CHECK(out[i] == (char)(size * (size - 1) / 2 + size * i));

    char a[2] = {3, 'a'}, b[2] = {4, 'b'};
    OK(MPI_Reduce_local(a, b, 2, MPI_CHAR, MPI_MAX));
    CHECK(b[0] == 4 && b[1] == 'b');
    report_ok("char_reductions");
    MPI_Finalize();
    return 0;
}
