#!/usr/bin/env bash
# The programs' one command-line convention (tools/cli.h), program by
# program: --help on stdout and exit 0, --version with the project's
# version, and anything refused (an unknown flag, a value that does not
# parse or is out of range, options that do not go together) named on
# stderr with the usage, exit status 2 and nothing run.
#   cli_conventions.sh UVM_TOOL UVM_LAB OUT_OF_CORE VERSION
set -u
tool=$1 lab=$2 ooc=$3 version=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0 checked=0

# expect STATUS STREAM PATTERN -- COMMAND...: COMMAND exits with STATUS and
# STREAM (out or err) matches the extended regular expression PATTERN; a
# refusal (2) writes nothing to stdout, --help and --version nothing to stderr.
expect() {
  local status=$1 stream=$2 pattern=$3
  shift 4
  local rc=0
  timeout 20 "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
  checked=$((checked + 1))
  local why=""
  [ "$rc" = "$status" ] || why="exit status $rc, not $status"
  grep -Eq -- "$pattern" "$work/$stream" || why="${why:+$why; }std$stream does not match /$pattern/"
  if [ "$status" = 2 ] && [ -s "$work/out" ]; then why="${why:+$why; }a refusal wrote to stdout"; fi
  if [ "$status" = 0 ] && [ -s "$work/err" ]; then why="${why:+$why; }wrote to stderr"; fi
  if [ -n "$why" ]; then
    failed=$((failed + 1))
    echo "FAILED: ${*##*/}: $why"
    sed 's/^/  stdout: /' "$work/out" | head -5
    sed 's/^/  stderr: /' "$work/err" | head -5
  fi
}

for p in "$tool" "$lab" "$ooc"; do
  name=${p##*/}
  expect 0 out "^usage: $name \[OPTIONS\]" -- "$p" --help
  expect 0 out "^usage: $name \[OPTIONS\]" -- "$p" -h
  expect 0 out "^$name $version\$" -- "$p" --version
  expect 2 err "^$name: The following argument was not expected: --bogus\$" -- "$p" --bogus
  expect 2 err "^usage: $name \[OPTIONS\]" -- "$p" --bogus
  expect 2 err "^run '$name --help' for every option\$" -- "$p" --bogus
done

# uvm-tool: a subcommand is needed, and each refuses what is not its own.
expect 2 err "^uvm-tool: which\? gpus, peers, topo, stats, metrics or top" -- "$tool"
expect 2 err "^uvm-tool gpus: The following argument was not expected: extra\$" -- "$tool" gpus extra
expect 2 err "^uvm-tool gpus: The following arguments were not expected: --url http://127.0.0.1:1\$" -- "$tool" gpus --url http://127.0.0.1:1
expect 0 out "^usage: uvm-tool top \[OPTIONS\]" -- "$tool" top --help
expect 0 out "^usage: uvm-tool stats \[OPTIONS\]" -- "$tool" stats --help
expect 2 err "^uvm-tool top: --count: 'abc' is not a whole number" -- "$tool" top --demo --count abc
expect 2 err "^usage: uvm-tool top \[OPTIONS\]" -- "$tool" top --demo --count abc
expect 2 err "^uvm-tool top: --count: '-1' is not a whole number" -- "$tool" top --demo --count -1
expect 2 err "^uvm-tool top: --interval: '0' is not a number above 0" -- "$tool" top --demo --interval 0
expect 2 err "^uvm-tool top: --serve: '70000' is not a whole number from 0 to 65535" -- "$tool" top --demo --serve 70000
expect 2 err "^uvm-tool top: --serve requires --demo" -- "$tool" top --url http://127.0.0.1:1 --serve 0
expect 2 err "^uvm-tool top: --url excludes --demo" -- "$tool" top --demo --url http://127.0.0.1:1
expect 2 err "^uvm-tool top: --url or --demo is required" -- "$tool" top
expect 2 err "^uvm-tool stats: --url excludes --file" -- "$tool" stats --url http://127.0.0.1:1 --file x
expect 2 err "^uvm-tool metrics: --count: 1 required N missing|^uvm-tool metrics: The following argument was not expected: --count" -- "$tool" metrics --count

# uvm-lab: every value checked before anything runs (10^7 MiB used to be
# tried, and ran out of host memory).
expect 2 err "^uvm-lab: --footprint-mib needs a whole number of MiB, 1-1048576" -- "$lab" --footprint-mib 10000000
expect 2 err "^uvm-lab: --footprint-mib needs" -- "$lab" --footprint-mib 0
expect 2 err "^uvm-lab: --sweep needs LO:HI" -- "$lab" --sweep 1:2000000
expect 2 err "^uvm-lab: unknown workload 'bogus'" -- "$lab" --workload bogus
expect 2 err "^uvm-lab: unknown policy '1g'" -- "$lab" --policy 4k,1g
expect 2 err "^uvm-lab: --accesses needs a whole number" -- "$lab" --accesses -5
expect 2 err "^uvm-lab: --accesses: 1 required N missing" -- "$lab" --accesses
expect 2 err "^uvm-lab: --serve needs a port" -- "$lab" --serve 70000
expect 2 err "^uvm-lab: --bind requires --serve" -- "$lab" --bind 0.0.0.0

# out_of_core: its sizes, and how they go together.
expect 2 err "^out_of_core: --gpu-mib: '7' is not a whole number from 8" -- "$ooc" --gpu-mib 7
expect 2 err "^out_of_core: --gpu-mib: '9' is odd" -- "$ooc" --gpu-mib 9
expect 2 err "^out_of_core: --times: 'x' is not a whole number" -- "$ooc" --times x
expect 2 err "^out_of_core: --object-mib 64 is more than half of --gpu-mib 64" -- "$ooc" --gpu-mib 64 --object-mib 64
expect 2 err "^out_of_core: The following argument was not expected: 12" -- "$ooc" 12

if [ "$failed" != 0 ]; then
  echo "$failed of $checked checks failed"
  exit 1
fi
echo "ok: $checked checks of uvm-tool, uvm-lab and out_of_core"
