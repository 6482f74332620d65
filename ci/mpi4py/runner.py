"""Runs mpi4py's test/main.py unchanged, with a unittest result class that
records each test's outcome, one line per test (and per failing subtest):

    OUTCOME<TAB>TEST-ID<TAB>DETAIL

in OUT.<rank> (OUTCOME: ok, FAIL, ERROR, skip, xfail, XPASS; DETAIL: the
exception's last line or the skip reason), and "END<TAB>tests run" once the
run finished. ci/mpi4py/run.sh compares them with expected-failures.txt; a
rank without its END line crashed or hung.

    python3 runner.py TESTDIR OUT [main.py options...]
"""

import os
import sys
import unittest

testdir, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, testdir)
sys.dont_write_bytecode = True
import main  # noqa: E402  (mpi4py's test/main.py)


def last_line(text):
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


class Recording(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        from mpi4py import MPI

        rank = MPI.COMM_WORLD.Get_rank()
        self._out = open(f"{out}.{rank}", "w", encoding="utf-8")  # noqa: SIM115

    def _rec(self, outcome, test, detail=""):
        detail = " ".join(detail.split())[:300]
        self._out.write(f"{outcome}\t{test.id()}\t{detail}\n")
        self._out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._rec("ok", test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._rec("FAIL", test, last_line(self._exc_info_to_string(err, test)))

    def addError(self, test, err):
        super().addError(test, err)
        self._rec("ERROR", test, last_line(self._exc_info_to_string(err, test)))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._rec("skip", test, reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._rec("xfail", test)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._rec("XPASS", test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            # Counted against the test itself (one line per failing subtest).
            kind = "FAIL" if issubclass(err[0], test.failureException) else "ERROR"
            self._rec(kind, test, last_line(self._exc_info_to_string(err, test)))

    def stopTestRun(self):
        super().stopTestRun()
        self._out.write(f"END\t{self.testsRun}\t\n")
        self._out.close()


class Runner(unittest.TextTestRunner):
    resultclass = Recording


if __name__ == "__main__":
    os.chdir(testdir)
    main.main(module=None, argv=[os.path.join(testdir, "main.py"), *args], testRunner=Runner)
