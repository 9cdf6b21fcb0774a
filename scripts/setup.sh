#!/usr/bin/env bash
# Installs what cgrad needs to build and test on Debian (bookworm or later).
# Run as root (or with sudo available). Safe to run again.
set -euo pipefail
case "${1:-}" in -h | --help) echo "usage: scripts/setup.sh (no arguments; CG_FUZZ=1: also clang and clang-format)"; exit 0 ;; esac
[ $# -eq 0 ] || { echo "setup.sh: no arguments are taken, not '$1' (usage: scripts/setup.sh)" >&2; exit 2; }
pkgs=(build-essential meson ninja-build pkg-config libblis-serial-dev liblapack-dev check libcjson-dev libpng-dev
      libxxhash-dev libopenmpi-dev openmpi-bin libplplot-dev plplot-driver-cairo fonts-dejavu-core
      libsentencepiece-dev locales)
# CG_FUZZ=1 (set by .ci/run): also clang and its libFuzzer runtime for scripts/fuzz.sh,
# and clang-format for scripts/check_format.sh
[ "${CG_FUZZ:-0}" = 1 ] && pkgs+=(clang libclang-rt-14-dev clang-format)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# a locale with a decimal comma: the tests of numbers written and read under a
# host program's locale (tests/testutil.c cg_test_comma_locale) skip without one
if ! locale -a 2>/dev/null | grep -qi '^de_DE\.utf-\?8$'; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: generating the de_DE.UTF-8 locale"
  { $SUDO sed -i 's/^# *\(de_DE\.UTF-8 UTF-8\)/\1/' /etc/locale.gen &&
    { grep -q '^de_DE\.UTF-8 UTF-8' /etc/locale.gen ||
      echo 'de_DE.UTF-8 UTF-8' | $SUDO tee -a /etc/locale.gen >/dev/null; } &&
    $SUDO locale-gen >/dev/null; } ||
    echo "setup: warning: could not generate de_DE.UTF-8; the tests that need it are skipped" >&2
fi
