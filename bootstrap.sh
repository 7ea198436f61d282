#!/usr/bin/env bash
# Fresh machine, step 1: Debian/Ubuntu packages if missing (python3-venv, a JRE, Maven,
# gcc and python3-dev for the compiled build),
# a virtual environment in .venv with hisparse[dev] installed (editable), and TLC.
# A venv works on Debian's system Python, where `pip install` outside one is refused
# (externally-managed-environment).
set -euo pipefail
cd "$(dirname "$0")"

need=()
probe=$(mktemp -d)
python3 -m venv "$probe/v" >/dev/null 2>&1 || need+=(python3-venv)
rm -rf "$probe"
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need+=(maven)
# the tests build the mypyc-compiled core: a C compiler and the Python headers
cc_name=$(python3 -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "cc").split()[0])')
command -v "$cc_name" >/dev/null || need+=(gcc)
python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
    need+=(python3-dev)
if ((${#need[@]})); then
    if ! command -v apt-get >/dev/null; then
        echo "bootstrap: please install ${need[*]} (no apt-get on this machine)" >&2
        exit 1
    fi
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "bootstrap: installing ${need[*]} with apt-get" >&2
    $sudo apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${need[@]}"
fi

python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# NIXL for the P/D import tests; --no-deps: it requires torch, which host memory does not use
.venv/bin/python -m pip install -q --no-deps 'nixl-cu12==1.5.1'
.venv/bin/hisparse setup
