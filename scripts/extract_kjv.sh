#!/usr/bin/env bash
# extract_kjv.sh — writes the King James Bible as plain text (one verse per line, verse references
# stripped) to ${POSGRAD_HOME:-$HOME/.local/share/posgrad}/kjv.txt, posgrad's offline default corpus
# (`--corpus kjv`; see data/corpus.h, default_data_home()).
#
# Source: Debian's `bible-kjv` package. Its text lives in a compressed random-access format
# (/usr/lib/bible.data) that only its `bible` program reads, so we ask `bible` for the whole range
# Gen1:1-Rev22:21 with pretty-printing toggled off (-f), which prints one verse per line as
# "Ge1:1 In the beginning ...", and strip the "Book C:V " prefix. Takes well under a second.
#
# Idempotent: if kjv.txt exists and matches its recorded sha256 (kjv.txt.sha256, written beside it),
# nothing is done. --force re-extracts. The output is written atomically (temp file + mv), so an
# interrupted run never leaves a truncated corpus behind. Not done here: installing bible-kjv
# (scripts/setup.sh does that) or any tokenisation.
#
#   ./scripts/extract_kjv.sh            # extract if missing
#   ./scripts/extract_kjv.sh --force    # re-extract
set -euo pipefail

# What Debian 12's bible-kjv 4.38 produces: 31102 verses, 4137850 bytes. Another package version
# may differ; we then warn (and still accept it if the verse count is right).
EXPECTED_SHA256="b5c4940bcfeee072c0935b5200d0f9d88a00a0199cb0961d16133458fcdfae5d"
EXPECTED_BYTES=4137850
EXPECTED_VERSES=31102

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "extract_kjv: unknown argument '$arg' (use --force or --help)" >&2; exit 2 ;;
  esac
done

home="${POSGRAD_HOME:-${HOME:-/root}/.local/share/posgrad}"
out="$home/kjv.txt"
sumfile="$out.sha256"

file_size() { stat -c %s "$1"; }
file_sha() { sha256sum "$1" | awk '{print $1}'; }

if [[ $force -eq 0 && -f "$out" && -f "$sumfile" ]]; then
  if [[ "$(file_sha "$out")" == "$(awk '{print $1}' "$sumfile")" ]]; then
    echo "extract_kjv: $out already present ($(file_size "$out") bytes), skipping (--force to redo)"
    exit 0
  fi
  echo "extract_kjv: $out does not match its recorded sha256, re-extracting"
fi

BIBLE=""
if command -v bible >/dev/null 2>&1; then
  BIBLE="$(command -v bible)"
elif [[ -x /usr/bin/bible ]]; then  # root's PATH may lack /usr/bin in odd environments
  BIBLE=/usr/bin/bible
fi
if [[ -z "$BIBLE" ]]; then
  echo "extract_kjv: the 'bible' program is missing — install Debian's bible-kjv package" \
       "(apt-get install bible-kjv, or run ./scripts/setup.sh)" >&2
  exit 1
fi

mkdir -p "$home"
tmp="$(mktemp "$home/.kjv.txt.XXXXXX")"
trap 'rm -f "$tmp" "$tmp.raw"' EXIT

# -f toggles pretty-printing off: one verse per line, prefixed by its reference ("1Sm3:4 ", "SSol1:1 ").
# stdin from /dev/null so `bible` never waits for interactive input.
"$BIBLE" -f 'Gen1:1-Rev22:21' </dev/null >"$tmp.raw"

verses=$(wc -l <"$tmp.raw")
bad=$(grep -cvE '^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ ' "$tmp.raw" || true)
if [[ "$verses" -ne $EXPECTED_VERSES || "$bad" -ne 0 ]]; then
  echo "extract_kjv: unexpected output from $BIBLE: $verses lines (expected $EXPECTED_VERSES)," \
       "$bad without a verse reference" >&2
  exit 1
fi
sed -E 's/^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ //' "$tmp.raw" >"$tmp"
rm -f "$tmp.raw"
sync "$tmp" 2>/dev/null || true

sha="$(file_sha "$tmp")"
size="$(file_size "$tmp")"
if [[ "$sha" != "$EXPECTED_SHA256" || "$size" -ne $EXPECTED_BYTES ]]; then
  echo "extract_kjv: warning: text differs from Debian 12 bible-kjv 4.38 ($size bytes, sha256 $sha;" \
       "expected $EXPECTED_BYTES bytes, $EXPECTED_SHA256) — results will not match published numbers" >&2
fi
chmod 0644 "$tmp"
mv -f "$tmp" "$out"
echo "$sha  kjv.txt" >"$sumfile.tmp" && mv -f "$sumfile.tmp" "$sumfile"
trap - EXIT
echo "extract_kjv: wrote $out ($size bytes, $verses verses, sha256 $sha)"
