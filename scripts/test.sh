#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the README's test command.
#   scripts/test.sh            release build in build/
#   scripts/test.sh --sanitize also an ASan+UBSan build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h | --help) echo "usage: scripts/test.sh [--sanitize]"; exit 0 ;;
  "" | --sanitize) ;;
  *) echo "test.sh: unknown argument '$1' (usage: scripts/test.sh [--sanitize])" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "test.sh: one argument at most (usage: scripts/test.sh [--sanitize])" >&2; exit 2; }
scripts/setup.sh
# build.ninja, not the directory: a `meson setup` that failed or was
# interrupted leaves one without it, and ninja cannot build there
[ -f build/build.ninja ] || meson setup build
ninja -C build
meson test -C build --print-errorlogs
# Install into a staging directory and build the examples out of tree with
# pkg-config (shared and static).
scripts/test_install.sh build
if [ "${1:-}" = "--sanitize" ]; then
  # MPI is left out of this build: Open MPI's own start-up leaks memory, which
  # LeakSanitizer would report; the MPI equivalence test runs in the release build.
  # -g1 (line tables only): the reports keep their file:line, and the build
  # takes two thirds of full -g's time (96 s against 144 s on 2 cores).
  [ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined \
    -Dbuildtype=debugoptimized -Dmpi=disabled -Dc_args=-g1 -Dcpp_args=-g1
  ninja -C build-asan
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    meson test -C build-asan --print-errorlogs --timeout-multiplier 4
fi
