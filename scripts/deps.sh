#!/usr/bin/env bash
# Installs the Debian 12 packages kvtier needs to build, test and benchmark (see README.md,
# "Dependencies", for why each is there). Idempotent; skips apt when all are present.
# KVT_WITH_CEPH=1 adds the single-node Ceph packages used by the shared-tier tests.
set -euo pipefail
PKGS=(build-essential cmake pkg-config
      liburing-dev libisal-dev libssl-dev libinih-dev libcmocka-dev
      libhiredis-dev librados-dev libradospp-dev libcurl4-openssl-dev
      fio redis-server redis-tools gnuplot-nox jq python3 python3-venv curl clang libclang-rt-dev
      libmicrohttpd-dev prometheus libfuse3-dev fuse3 libzmq3-dev libmsgpack-dev)
if [ "${KVT_WITH_CEPH:-0}" = 1 ]; then
	PKGS+=(ceph-mon ceph-osd ceph-mgr radosgw ceph-common uuid-runtime ceph-mds ceph-fuse)
fi
missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}"
	SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "deps: all present"
