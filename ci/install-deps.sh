#!/usr/bin/env bash
# Installs what tmpi's tests and benchmarks need on a fresh Debian 12 machine.
# Idempotent: does nothing when everything is already present.
set -euo pipefail

need=()
command -v mpiexec.hydra >/dev/null 2>&1 || need+=(mpich libmpich-dev)
command -v mpicc.openmpi >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v ip >/dev/null 2>&1 || need+=(iproute2)

if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
