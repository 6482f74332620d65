#!/usr/bin/env bash
# Installs what tmpi's tests and benchmarks need on a fresh Debian 12 machine.
# Idempotent: does nothing when everything is already present.
set -euo pipefail

need=()
command -v mpiexec.hydra >/dev/null 2>&1 || need+=(mpich libmpich-dev)
command -v mpicc.openmpi >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# The PMIx client library tmpi loads at run time under a PMIx runtime
# (Open MPI's mpirun, srun --mpi=pmix); openmpi-bin pulls it in too.
ldconfig -p 2>/dev/null | grep -q 'libpmix\.so\.2 ' || need+=(libpmix2)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# ci/mpi4py builds mpi4py from source: pip and Python's headers.
python3 -c 'import os, pip, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
    >/dev/null 2>&1 || need+=(python3 python3-pip python3-dev)

if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
