#!/usr/bin/env bash
# Install the Debian packages the build and tests need, if missing (fresh Debian 12 with only
# Rust, gcc and python3). Idempotent; quiet when everything is present.
set -euo pipefail
need=()
command -v nm >/dev/null || need+=(binutils)
command -v unshare >/dev/null || need+=(util-linux)
command -v shellcheck >/dev/null || need+=(shellcheck)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v unzip >/dev/null || need+=(unzip)
command -v debootstrap >/dev/null || need+=(debootstrap)  # ci/oldglibc.sh
if ((${#need[@]})); then
  echo "ci/deps.sh: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
