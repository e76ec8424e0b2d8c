#!/usr/bin/env bash
# bad_input_test.sh — the benchmark programs' answers to bad input (ctest runs one tool per test):
# each case wants the exit status (2: usage error, 1: the machine cannot run it) and its message on
# stderr naming the bad input, with nothing on stdout (refused before any output). None of them
# allocates much or runs a benchmark: oversized requests are refused by the up-front estimates.
#
#   bench/bad_input_test.sh gemm|train|attention|dist|scripts BIN_DIR
set -u
tool=$1
dir=$2
here=$(cd "$(dirname "$0")" && pwd)
failed=0

# expect RC PATTERN PROGRAM ARGS...: PROGRAM ARGS exits RC, PATTERN (fixed string) is on stderr, stdout is empty.
expect() {
  local want=$1 pattern=$2
  shift 2
  local out err rc
  out=$(mktemp)
  err=$(mktemp)
  timeout 60 "$@" > "$out" 2> "$err"
  rc=$?
  if [[ $rc != "$want" ]] || ! grep -qF -- "$pattern" "$err" || [[ -s $out ]]; then
    echo "FAIL: $* -> exit $rc (want $want), stderr must name '$pattern', stdout must be empty" >&2
    sed 's/^/  stderr: /' "$err" | head -5 >&2
    sed 's/^/  stdout: /' "$out" | head -5 >&2
    failed=1
  fi
  rm -f "$out" "$err"
}

# expect_help PROGRAM: --help prints to stdout, exit 0, with its defaults.
expect_help() {
  local text rc
  text=$(timeout 60 "$@" --help 2> /dev/null)
  rc=$?
  if [[ $rc != 0 ]] || ! grep -q -- "--" <<< "$text"; then
    echo "FAIL: $* --help -> exit $rc, want 0 and the options on stdout" >&2
    failed=1
  fi
}

case $tool in
  gemm)
    g=$dir/bench_gemm
    expect_help "$g"
    expect 2 "'-8x8x8'" "$g" --shapes -8x8x8
    expect 2 "'99999999999999999999x8x8'" "$g" --shapes 99999999999999999999x8x8
    expect 2 "'3000000000x1x1'" "$g" --shapes 3000000000x1x1
    expect 2 "2147483647x2147483647x1 needs" "$g" --shapes 2147483647x2147483647x1
    expect 2 "'0x8x8'" "$g" --shapes 0x8x8
    expect 2 "'8x0x8'" "$g" --shapes 16x16x16,8x0x8
    expect 2 "'8x8x8zz'" "$g" --shapes 8x8x8zz
    expect 2 "'4x4x4:zz:tb'" "$g" --shapes 4x4x4:zz:tb
    expect 2 "'4x4x4:ta:ta'" "$g" --shapes 4x4x4:ta:ta
    expect 2 "empty item in '8x8x8,'" "$g" --shapes 8x8x8,
    expect 2 "--shapes is empty" "$g" --shapes ''
    expect 2 "--reps" "$g" --reps abc
    expect 2 "--reps" "$g" --reps -5
    expect 2 "--reps" "$g" --reps
    expect 2 "--threads" "$g" --threads 0
    expect 2 "--threads" "$g" --threads abc
    expect 2 "--threads" "$g" --threads 4294967297
    expect 2 "--min-ms" "$g" --min-ms abc
    expect 2 "--min-ms" "$g" --min-ms -3
    expect 2 "--min-ms" "$g" --min-ms nan
    expect 2 "--isa" "$g" --isa bogus
    expect 2 "--precision" "$g" --precision fp16
    expect 2 "--against" "$g" --against numpy
    expect 2 "--bogus" "$g" --bogus
    ;;
  train)
    t=$dir/bench_train
    expect_help "$t"
    expect 2 "--methods is empty" "$t" --methods ''
    expect 2 "empty item in 'rope,'" "$t" --methods rope,
    expect 2 "empty item in 'rope,,none'" "$t" --methods rope,,none
    expect 2 "'bogus'" "$t" --methods bogus
    expect 2 "'gpu'" "$t" --device gpu
    expect 2 "'cpu:3'" "$t" --device cpu:3
    expect 2 "'cuda:-1'" "$t" --device cuda:-1
    expect 2 "--steps" "$t" --steps 0
    expect 2 "--size" "$t" --size huge
    expect 1 "--batch 65536 x --context 65536" "$t" --steps 1 --warmup 0 --methods none --batch 65536 --context 65536
    ;;
  attention)
    a=$dir/bench_attention
    expect_help "$a"
    expect 2 "--methods is empty" "$a" --methods ''
    expect 2 "empty item in 'rope,'" "$a" --methods rope,
    expect 2 "empty item in ',rope'" "$a" --methods ,rope
    expect 2 "'bogus'" "$a" --methods bogus
    expect 2 "--T is empty" "$a" --T ''
    expect 2 "empty item in '16,'" "$a" --T 16,
    expect 2 "'8,x'" "$a" --T 8,x
    expect 2 "--min-ms" "$a" --min-ms nan
    expect 2 "--min-ms" "$a" --min-ms -1
    # An encoding that cannot be set up (RoPE needs an even head dim) is reported as such, not as a
    # failed validation.
    out=$(timeout 60 "$a" --min-ms 0 --max-reps 1 --B 1 --H 1 --D 1 --T 4 --methods rope 2> /dev/null)
    rc=$?
    if [[ $rc != 1 ]] || grep -q "VALIDATION FAILED" <<< "$out" || ! grep -q "could not be set up" <<< "$out"; then
      echo "FAIL: bench_attention --D 1 --methods rope -> exit $rc, want 1 and a setup failure, not a validation one" >&2
      failed=1
    fi
    ;;
  dist)
    d=$dir/bench_dist
    expect_help "$d"
    expect 2 "bogus" "$d" --pos bogus
    expect 2 "--pos" "$d" --pos ''
    expect 2 "rope,alibi" "$d" --pos rope,alibi
    expect 2 "--width 6" "$d" --width 6
    expect 2 "--batch" "$d" --batch 0
    expect 1 "--layers 64 x --width 4096" "$d" --batch 65536 --layers 64 --width 4096 --context 8192
    ;;
  scripts)
    expect_help "$here/scaling.sh"
    expect 2 "'abc'" "$here/scaling.sh" abc
    expect 2 "'0'" "$here/scaling.sh" 0
    expect 2 "'-1'" "$here/scaling.sh" -1
    expect 2 "--threads" "$here/scaling.sh" 1 --threads 2
    expect 2 "--sizes is empty" "$here/vs_pytorch.sh" --sizes ''
    expect 2 "--modes is empty" "$here/vs_pytorch.sh" --modes ''
    expect 2 "empty item in 'eager,'" "$here/vs_pytorch.sh" --modes eager,
    expect 2 "empty item in 'rope,'" "$here/vs_pytorch.sh" --methods rope,
    expect 2 "'fast'" "$here/vs_pytorch.sh" --modes fast
    expect 2 "takes no --modes" "$here/vs_pytorch.sh" --load --modes eager
    expect 2 "--rounds" "$here/vs_pytorch_train.sh" --rounds 0
    ;;
  *)
    echo "bad_input_test.sh: unknown tool '$tool' (gemm, train, attention, dist, scripts)" >&2
    exit 2
    ;;
esac
exit $failed
