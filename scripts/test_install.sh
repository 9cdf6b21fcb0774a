#!/usr/bin/env bash
# Installs cgrad from a build directory into a staging directory (DESTDIR) and
# builds the example programs OUT OF TREE against it with nothing but
# pkg-config, once linked to the shared library and once to the static one,
# then runs them. Also checks that the shared library exports only cg_
# symbols and has a soname.
#   scripts/test_install.sh [BUILD_DIR (default build)]
set -euo pipefail
usage="usage: scripts/test_install.sh [BUILD_DIR (default build)]"
case "${1:-}" in -h | --help) echo "$usage"; exit 0 ;; esac
[ $# -le 1 ] || { echo "test_install: one argument at most ($usage)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
# the default: the tree's build/, whatever the current directory
build=${1:-$root/build}
[ -f "$build/build.ninja" ] ||
  { echo "test_install: '$build' is not a meson build directory (meson setup $build)" >&2; exit 2; }
build=$(cd "$build" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/stage
meson install -C "$build" --destdir "$stage" --quiet >/dev/null

pc=$(find "$stage" -name cgrad.pc | head -n 1)
[ -n "$pc" ] || { echo "test_install: no cgrad.pc was installed" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
# The .pc's prefix moved into the stage (not PKG_CONFIG_SYSROOT_DIR: that
# would also move the absolute path of the system's libblis.a).
prefix=$(pkg-config --variable=prefix cgrad)
pkgconf() { pkg-config --define-variable=prefix="$stage$prefix" "$@"; }
libdir=$(dirname "$(dirname "$pc")")   # the staged lib directory
so=$(find "$libdir" -maxdepth 1 -name 'libcgrad.so.*' -type f | head -n 1)
[ -f "$libdir/libcgrad.a" ] || { echo "test_install: no libcgrad.a" >&2; exit 1; }
readelf -d "$so" | grep -q 'SONAME.*libcgrad\.so\.[0-9]' ||
  { echo "test_install: $so has no versioned soname" >&2; exit 1; }
bad=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^cg_' || true)
[ -z "$bad" ] || { echo "test_install: $so exports non-cg_ symbols: $(echo $bad | head -c 300)" >&2; exit 1; }

# Every installed header compiles alone, as C11 and as C++17, with only the
# staged include directory, and finds the headers it includes beside itself:
# a program's own header of the same path ("core/tensor.h", "nn/module.h",
# ... in a directory it puts first with -I) is never taken for cgrad's.
inc=$stage$prefix/include/cgrad
mapfile -t headers < <(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort)
[ ${#headers[@]} -ge 20 ] || { echo "test_install: only ${#headers[@]} headers installed" >&2; exit 1; }
cc=${CC:-cc} cxx=${CXX:-c++}
for h in "${headers[@]}"; do
  rm -rf "$work/decoy" && mkdir -p "$work/decoy"
  for other in "${headers[@]}"; do
    [ "$other" = "$h" ] && continue
    mkdir -p "$work/decoy/$(dirname "$other")"
    echo "#error \"the program's own $other was taken for cgrad's\"" > "$work/decoy/$other"
  done
  printf '#include "%s"\nint cg_test_header_alone;\n' "$h" > "$work/header.c"
  (cd "$work" && $cc -std=c11 -Wall -Wextra -pedantic -Werror -Idecoy -I"$inc" -c header.c -o header.o &&
   $cxx -std=c++17 -Wall -Wextra -Werror -Idecoy -I"$inc" -x c++ -c header.c -o header.o) ||
    { echo "test_install: the installed header $h does not compile alone (C11 and C++17)" >&2; exit 1; }
done
rm -rf "$work/decoy"

[ ! -e "$stage/usr/local/bin/charlm" ] && [ ! -e "$stage/usr/local/bin/bench" ] ||
  { echo "test_install: programs installed under generic names" >&2; exit 1; }

# The README's example program (the C block under "Writing a model").
awk '/^## Writing a model against the C API/ {on = 1} on && /^```c$/ {c = 1; next}
     c && /^```$/ {exit} c {print}' "$root/README.md" > "$work/readme_example.c"
[ -s "$work/readme_example.c" ] || { echo "test_install: no C example in README.md" >&2; exit 1; }

# The worked example of docs/own_module.md (its first C block).
awk '/^```c$/ {c = 1; next} c && /^```$/ {exit} c {print}' "$root/docs/own_module.md" \
  > "$work/own_module.c"
[ -s "$work/own_module.c" ] || { echo "test_install: no C example in docs/own_module.md" >&2; exit 1; }

# The incremental decoding block of docs/api.md (a fragment: its KV cache
# calls once took arguments the API no longer has), inside a program that
# declares what it assumes: a decoder stack, a step's input, the encoder's
# memory, the batch rows beam search keeps.
{
  cat <<'PROG'
#include <stdio.h>

#include "cgrad.h"

int main(void)
{
    cg_rng r = cg_rng_new(1);
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16};
    cg_dec_stack *dec = cg_dec_stack_new(2, &cfg, &r);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(2, 1, 8)), *memory = cg_randn(&r, CG_SHAPE(2, 3, 8));
    cg_tensor *src_pad = NULL, *parents = cg_from_i64(CG_SHAPE(2), (int64_t[]){1, 1});
PROG
  awk '/^Incremental decoding:/ {on = 1} on && /^```c$/ {c = 1; next} c && /^```$/ {exit} c {print}' \
    "$root/docs/api.md"
  cat <<'PROG'
    printf("api.md's KV cache block: %s\n", ok ? "a step decoded, rows reordered" : cg_last_error());
    cg_release_all(4, h, x, memory, parents);
    cg_module_free(CG_MODULE(dec));
    return ok ? 0 : 1;
}
PROG
} > "$work/api_kv_cache.c"
grep -q cg_kv_cache_reorder "$work/api_kv_cache.c" ||
  { echo "test_install: no KV cache block in docs/api.md" >&2; exit 1; }

# A program that uses the cJSON trees of the public API (cg_st_metadata_json):
# `pkg-config --libs cgrad` must link libcjson itself (Requires: libcjson),
# or the link fails with "DSO missing from command line".
cat > "$work/metadata_json.c" <<'PROG'
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cgrad.h"

int main(void)
{
    cg_st_writer *w = cg_st_writer_new();
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddNumberToObject(cfg, "d", 64);
    cg_tensor *t = cg_ones(CG_SHAPE(2));
    bool ok = w && cfg && t && cg_st_add_f32(w, "t", t) && cg_st_set_metadata_json(w, "config", cfg) &&
              cg_st_writer_save(w, "meta.safetensors");
    cJSON_Delete(cfg);
    cg_st_writer_free(w);
    cg_release(t);
    cg_st_file *f = ok ? cg_st_open("meta.safetensors") : NULL;
    cJSON *back = f ? cg_st_metadata_json(f, "config") : NULL;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(back, "d");
    if (!cJSON_IsNumber(d) || d->valuedouble != 64) {
        fprintf(stderr, "metadata_json: %s\n", cg_last_error());
        return 1;
    }
    printf("config.d = %g\n", d->valuedouble);
    cJSON_Delete(back);
    cg_st_close(f);
    return 0;
}
PROG

# The version a program was compiled with (core/version.h, installed) is
# the library's it runs with, and pkg-config's.
cat > "$work/version_check.c" <<'PROG'
#include <stdio.h>

#include "cgrad.h"

int main(void)
{
    if (cg_library_version() != CG_VERSION_NUMBER) {
        fprintf(stderr, "headers %s (%d), library %d\n", CG_VERSION_STRING, CG_VERSION_NUMBER,
                cg_library_version());
        return 1;
    }
    printf("%s\n", CG_VERSION_STRING);
    return 0;
}
PROG

# Every example: the README's, the docs', examples/*.c, in
# a directory of their own (no include path into the source tree).
for src in "$work/readme_example.c" "$work/own_module.c" "$work/api_kv_cache.c" \
           "$work/metadata_json.c" "$work/version_check.c" "$root"/examples/*.c; do
  [ -f "$src" ] || continue
  name=$(basename "$src" .c)
  case $name in zoo_* | ddp) continue ;; esac # below: cgrad-zoo (and a checkpoint), cgrad-dist
  [ "$src" = "$work/$name.c" ] || cp "$src" "$work/$name.c"
  args=()
  case $name in
    mlp) args=(--steps 100) ;;
    langid) args=(--steps 20 --data "$root/tests/data/en_de_sample.tsv") ;;
  esac
  # shared
  (cd "$work" && $cc -std=c11 -O2 -Wall -Wextra -Werror -o "$name" "$name.c" \
      $(pkgconf --cflags --libs cgrad))
  (cd "$work" && LD_LIBRARY_PATH=$libdir "./$name" "${args[@]}") > "$work/$name.shared.out" ||
    { echo "test_install: $name (shared) failed" >&2; cat "$work/$name.shared.out" >&2; exit 1; }
  # static: the archive instead of the .so, plus Libs.private / Requires.private
  (cd "$work" && $cc -std=c11 -O2 -Wall -Wextra -Werror -o "$name.static" "$name.c" \
      $(pkgconf --static --cflags --libs cgrad | sed 's/-lcgrad\b/-l:libcgrad.a/'))
  if ldd "$work/$name.static" | grep -q libcgrad; then
    echo "test_install: $name.static is linked to the shared library" >&2; exit 1
  fi
  (cd "$work" && "./$name.static" "${args[@]}") > "$work/$name.static.out" ||
    { echo "test_install: $name (static) failed" >&2; cat "$work/$name.static.out" >&2; exit 1; }
  cmp -s "$work/$name.shared.out" "$work/$name.static.out" ||
    { echo "test_install: $name gives different output shared and static" >&2;
      diff "$work/$name.shared.out" "$work/$name.static.out" >&2; exit 1; }
  echo "test_install: $name ok (shared and static): $(tail -n 1 "$work/$name.shared.out")"
done

# The extension suite (tests/test_extend.c): an op with its backward, a
# module with buffers, an optimizer and a schedule of a user's, written with
# "cgrad.h" alone, built here with the installed headers and Check
# (pkg-config's check, which the tests need anyway) and run in both modes.
cp "$root/tests/test_extend.c" "$work/test_extend.c"
(cd "$work" && $cc -std=c11 -O2 -Wall -Wextra -Werror -o test_extend test_extend.c \
    $(pkgconf --cflags --libs cgrad) $(pkg-config --cflags --libs check) -lpthread) ||
  { echo "test_install: tests/test_extend.c does not build against the installed headers" >&2; exit 1; }
for debug in 0 1; do
  (cd "$work" && CK_FORK=no CG_DEBUG=$debug LD_LIBRARY_PATH=$libdir ./test_extend) \
    > "$work/test_extend.out" 2>&1 ||
    { echo "test_install: test_extend (CG_DEBUG=$debug) failed" >&2; cat "$work/test_extend.out" >&2; exit 1; }
done
echo "test_install: test_extend ok (the installed headers alone): $(tail -n 1 "$work/test_extend.out")"

[ "$(cat "$work/version_check.shared.out")" = "$(pkgconf --modversion cgrad)" ] ||
  { echo "test_install: core/version.h says $(cat "$work/version_check.shared.out"), cgrad.pc $(pkgconf --modversion cgrad)" >&2; exit 1; }

# The zoo's models as a library: libcgrad-zoo (cgrad-zoo.pc, models/zoo/zoo.h)
# exports only cg_zoo_*; its examples, built out of tree shared and static,
# print what the installed programs print from checkpoints those trained.
# installed_lib NAME PREFIX HEADER: libNAME.so.* (its path in $lib_so, with a
# versioned soname, exporting only PREFIX* symbols), libNAME.a, NAME.pc and
# HEADER (under include/cgrad/) were installed
installed_lib() {
  lib_so=$(find "$libdir" -maxdepth 1 -name "lib$1.so.*" -type f | head -n 1)
  [ -n "$lib_so" ] && [ -f "$libdir/lib$1.a" ] && [ -f "$libdir/pkgconfig/$1.pc" ] &&
    [ -f "$stage$prefix/include/cgrad/$3" ] ||
    { echo "test_install: lib$1, $1.pc or $3 was not installed" >&2; exit 1; }
  readelf -d "$lib_so" | grep -q "SONAME.*lib$1\.so\.[0-9]" ||
    { echo "test_install: $lib_so has no versioned soname" >&2; exit 1; }
  local bad
  bad=$(nm -D --defined-only "$lib_so" | awk '{print $3}' | grep -v "^$2" || true)
  [ -z "$bad" ] || { echo "test_install: $lib_so exports more than $2*: $(echo $bad | head -c 300)" >&2; exit 1; }
}
installed_lib cgrad-zoo cg_zoo_ models/zoo/zoo.h
bin=$stage$prefix/bin
words=(the a whale sea ship captain ahab white call me ishmael some years ago)
for ((i = 0; i < 600; i++)); do
  printf '%s ' "${words[$(((i * 7 + i / 3) % ${#words[@]}))]}"
  ((i % 10 == 9)) && printf '\n'
done >"$work/lm.txt"
for ((i = 0; i < 400; i++)); do printf 'the cat %d sat\tdie katze %d sass\n' $i $i; done >"$work/pairs.tsv"
# --precision fp32: the programs decode in the checkpoint's precision, the
# examples in the library's default, fp32 (train's auto is bf16 on some CPUs)
(cd "$work" && "$bin/cgrad-charlm" train --data lm.txt --d 16 --H 2 --layers 1 --d-ff 32 --T 16 \
   --batch-size 4 --steps 20 --eval-every 10 --threads 1 --precision fp32 --out lm.st >/dev/null 2>lm.log &&
 "$bin/cgrad-seq2seq" train --data pairs.tsv --tokenizer char --d 16 --H 2 --enc-layers 1 \
   --dec-layers 1 --d-ff 32 --max-tokens 200 --valid-size 20 --test-size 20 --test-limit 2 \
   --steps 20 --eval-every 10 --threads 1 --precision fp32 --out s2s.st >/dev/null 2>s2s.log) ||
  { echo "test_install: training the zoo's checkpoints failed: $(tail -n 2 "$work"/*.log)" >&2; exit 1; }
gen_flags=(--prompt "the whale" --length 120 --top-k 5 --temperature 0.8 --seed 3)
sentences=("the cat 7 sat" "the cat 250 sat")
(cd "$work" && "$bin/cgrad-charlm" sample --ckpt lm.st "${gen_flags[@]}" >zoo_generate.want 2>/dev/null &&
 "$bin/cgrad-seq2seq" translate --ckpt s2s.st --beam 4 "${sentences[@]}" >zoo_translate.want 2>/dev/null) ||
  { echo "test_install: the installed programs failed on their own checkpoints" >&2; exit 1; }
for name in zoo_generate zoo_translate; do
  cp "$root/examples/$name.c" "$work/$name.c"
  case $name in
    zoo_generate) args=(--ckpt lm.st "${gen_flags[@]}") ;;
    zoo_translate) args=(--ckpt s2s.st --beam 4 "${sentences[@]}") ;;
  esac
  (cd "$work" && $cc -std=c11 -O2 -Wall -Wextra -Werror -o "$name" "$name.c" \
      $(pkgconf --cflags --libs cgrad-zoo))
  (cd "$work" && $cc -std=c11 -O2 -Wall -Wextra -Werror -o "$name.static" "$name.c" \
      $(pkgconf --static --cflags --libs cgrad-zoo |
        sed 's/-lcgrad-zoo\b/-l:libcgrad-zoo.a/; s/-lcgrad\b/-l:libcgrad.a/'))
  if ldd "$work/$name.static" | grep -q libcgrad; then
    echo "test_install: $name.static is linked to a shared cgrad library" >&2; exit 1
  fi
  (cd "$work" && LD_LIBRARY_PATH=$libdir "./$name" "${args[@]}" >"$name.shared.out" &&
   "./$name.static" "${args[@]}" >"$name.static.out") ||
    { echo "test_install: $name failed" >&2; exit 1; }
  for kind in shared static; do
    cmp -s "$work/$name.want" "$work/$name.$kind.out" ||
      { echo "test_install: $name ($kind) differs from the installed program's output" >&2;
        diff "$work/$name.want" "$work/$name.$kind.out" >&2; exit 1; }
  done
  echo "test_install: $name ok (shared and static, equal to the program): $(head -c 60 "$work/$name.want" | tr '\n' '|')"
done

# Data parallelism for a user's own model: libcgrad-dist (cgrad-dist.pc,
# dist/dist.h) exports only cg_dist_*; examples/ddp.c, built out of tree
# shared and static, trains under mpirun on 2 ranks when the library was
# built with MPI and mpirun is here (else as one process), and the static
# build as one process.
installed_lib cgrad-dist cg_dist_ dist/dist.h
dso=$lib_so
if readelf -d "$so" | grep -q 'NEEDED.*libmpi'; then
  echo "test_install: libcgrad depends on MPI" >&2; exit 1
fi
cp "$root/examples/ddp.c" "$work/ddp.c"
(cd "$work" && $cc -std=c11 -O2 -Wall -Wextra -Werror -o ddp ddp.c $(pkgconf --cflags --libs cgrad-dist) &&
 $cc -std=c11 -O2 -Wall -Wextra -Werror -o ddp.static ddp.c \
   $(pkgconf --static --cflags --libs cgrad-dist | sed 's/-lcgrad-dist\b/-l:libcgrad-dist.a/; s/-lcgrad\b/-l:libcgrad.a/')) ||
  { echo "test_install: examples/ddp.c does not build against cgrad-dist" >&2; exit 1; }
if ldd "$work/ddp.static" | grep -q libcgrad; then
  echo "test_install: ddp.static is linked to a shared cgrad library" >&2; exit 1
fi
ranks=1
launch=()
if readelf -d "$dso" | grep -q 'NEEDED.*libmpi' && command -v mpirun >/dev/null; then
  ranks=2
  launch=(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 -x LD_LIBRARY_PATH)
fi
(cd "$work" && LD_LIBRARY_PATH=$libdir "${launch[@]}" ./ddp --steps 60 --out ddp.st >ddp.shared.out &&
 ./ddp.static --steps 60 >ddp.static.out) ||
  { echo "test_install: ddp failed" >&2; cat "$work"/ddp.*.out >&2; exit 1; }
grep -q "($ranks rank(s))" "$work/ddp.shared.out" && [ -s "$work/ddp.st" ] ||
  { echo "test_install: ddp did not train on $ranks rank(s) and save" >&2; cat "$work/ddp.shared.out" >&2; exit 1; }
echo "test_install: ddp ok (shared on $ranks rank(s), static on 1): $(tail -n 1 "$work/ddp.shared.out")"
