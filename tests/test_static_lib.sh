#!/usr/bin/env bash
# The static archives as a user links them without LTO (meson suite
# 'models'): a program built against the build's libcgrad.a and
# libcgrad-zoo.a (the uninstalled cgrad.pc and cgrad-zoo.pc, --static) with
# -fno-lto links and runs. Under -Db_lto=true GCC writes slim LTO objects
# (GIMPLE only) unless told -ffat-lto-objects: the installed archives then
# link only through this GCC's LTO plugin, and clang, -fno-lto or another
# GCC version stop at "plugin needed to handle lto object".
#   test_static_lib.sh BUILD_ROOT CC [FLAGS...]  (FLAGS: the build's own for a
#   link: its sanitizers, coverage)
set -uo pipefail
build=$1
shift
. "$(dirname "$0")/shell_lib.sh" static_lib
export PKG_CONFIG_PATH=$build/meson-uninstalled
cat >prog.c <<'PROG'
#include <stdio.h>

#include "cgrad.h"
#include "models/zoo/zoo.h"

int main(void)
{
    cg_tensor *t = cg_ones(CG_SHAPE(3));
    cg_tensor *s = cg_sum(t, 0, NULL, false);
    cg_zoo_model *m = cg_zoo_load("missing.safetensors");
    printf("%g %s\n", s ? cg_item(s) : -1.0, m ? "loaded" : "refused");
    cg_zoo_free(m);
    cg_release_all(2, t, s);
    return 0;
}
PROG
# -l:libNAME.a: the archive, not the shared library beside it
flags=$(pkg-config --static --cflags --libs cgrad-zoo) ||
  { echo "pkg-config found no cgrad-zoo-uninstalled.pc in $PKG_CONFIG_PATH" >&2; exit 1; }
flags=$(echo "$flags" | sed 's/-lcgrad-zoo\b/-l:libcgrad-zoo.a/; s/-lcgrad\b/-l:libcgrad.a/')
if "$@" -std=c11 -fno-lto -o prog prog.c $flags 2>link.err; then
  if ldd prog | grep -q libcgrad; then
    fail "prog is linked to a shared cgrad library: $(ldd prog | grep libcgrad | tr -d '\t')"
  fi
  out=$(./prog 2>&1)
  [ "$out" = "3 refused" ] || fail "prog printed '$out', not '3 refused'"
else
  fail "linking with -fno-lto against the static archives failed (slim LTO objects? -Db_lto needs -ffat-lto-objects): $(grep -m1 -E 'error|plugin needed|undefined' link.err)"
fi
finish
