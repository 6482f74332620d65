"""Compares the outcomes runner.py recorded (one file per rank) for each
rank count with expected-failures.txt and prints mpi4py's counts.

    python3 check.py EXPECTED NOT_TMPI WORKDIR N:RC [N:RC ...]

Files WORKDIR/res-N.RANK. Every failure, error, unexpected success and
skip must match a line of EXPECTED ("PATTERN  reason", PATTERN a test id,
fnmatch wildcards allowed); a skip whose reason matches a pattern of
NOT_TMPI is mpi4py's own choice (a missing optional Python package, spawn
turned off) and needs no line. Patterns whose reason starts with
"[not run]" are left out of the run by run.sh (they would hang). A rank without its END line crashed or
hung. Exit status 1 when anything is unexplained.
"""

import fnmatch
import pathlib
import sys


def patterns(path):
    out = []
    for line in pathlib.Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pat, _, reason = line.partition("  ")
        out.append((pat.strip(), reason.strip()))
    return out


def main():
    expected = patterns(sys.argv[1])
    not_tmpi = [p for p, _ in patterns(sys.argv[2])]
    work = pathlib.Path(sys.argv[3])
    bad = 0
    used = set()
    for arg in sys.argv[4:]:
        n, rc = (int(x) for x in arg.split(":"))
        counts = {"run": 0, "FAIL": set(), "ERROR": set(), "skip": set(), "XPASS": set()}
        unexplained = {}
        ended = 0
        for rank in range(n):
            f = work / f"res-{n}.{rank}"
            lines = f.read_text(encoding="utf-8").splitlines() if f.exists() else []
            for line in lines:
                outcome, tid, detail = (line.split("\t") + ["", ""])[:3]
                if outcome == "END":
                    ended += 1
                    if rank == 0:
                        counts["run"] = int(tid)
                    continue
                if outcome not in ("FAIL", "ERROR", "skip", "XPASS"):
                    continue
                counts[outcome].add(tid)
                if outcome == "skip" and any(fnmatch.fnmatchcase(detail, p) for p in not_tmpi):
                    continue
                hit = [p for p, _ in expected if fnmatch.fnmatchcase(tid, p)]
                if hit:
                    used.update(hit)
                else:
                    unexplained.setdefault((outcome, tid), f"rank {rank}: {detail}")
        crashed = ended < n
        failed = bool(counts["FAIL"] or counts["ERROR"] or counts["XPASS"])
        # mpi4py's main.py exits 1 after failures; any other status (a
        # signal, the launcher's timeout 124, an abort) is a crash or hang.
        if rc != 0 and not (rc == 1 and failed):
            crashed = True
        print(
            f"mpi4py: {n} rank(s): {counts['run']} tests run, {len(counts['FAIL'])} failed, "
            f"{len(counts['ERROR'])} errors, {len(counts['skip'])} skipped "
            f"(distinct tests over all ranks; launcher exit {rc})"
        )
        if crashed:
            bad += 1
            print(f"mpi4py: {n} rank(s): CRASH or HANG: {n - ended} rank(s) did not finish "
                  f"(exit {rc}); see the log above")
        for (outcome, tid), detail in sorted(unexplained.items()):
            bad += 1
            print(f"mpi4py: {n} rank(s): unlisted {outcome} {tid}: {detail}")
    for p, reason in expected:
        if p not in used and not reason.startswith("[not run]"):
            print(f"mpi4py: {p} is listed in expected-failures.txt but did not fail at any rank count")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
