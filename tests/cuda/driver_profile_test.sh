#!/bin/sh
# UVM_DRIVER_PROFILE (cuda/driver_api.cpp) on the stand-in driver: the tour
# run under it writes the table at exit, each handle made is released
# (cuMemCreate's calls equal cuMemRelease's), and without it no table is
# written.  driver_profile_test.sh TOUR FAKE_DRIVER WORKDIR
set -eu
tour=$1 driver=$2 dir=$3
mkdir -p "$dir"
out=$dir/driver_profile.txt
rm -f "$out"
UVM_BACKEND=cuda UVM_CUDA_DRIVER_LIBRARY=$driver UVM_DRIVER_PROFILE=$out "$tour" > /dev/null
head -1 "$out" | grep -q '^# uvm driver-call profile' || { echo "no table in $out"; exit 1; }
calls() { awk -v n="$1" '$1 == n { print $2 }' "$out"; }
made=$(calls cuMemCreate) released=$(calls cuMemRelease)
[ -n "$made" ] && [ "$made" -ge 1 ] || { echo "no cuMemCreate counted"; cat "$out"; exit 1; }
[ "$made" = "$released" ] || { echo "cuMemCreate $made, cuMemRelease $released"; exit 1; }
rm -f "$out"
UVM_BACKEND=cuda UVM_CUDA_DRIVER_LIBRARY=$driver "$tour" > /dev/null
[ ! -e "$out" ] || { echo "a table written without UVM_DRIVER_PROFILE"; exit 1; }
UVM_BACKEND=cuda UVM_CUDA_DRIVER_LIBRARY=$driver UVM_DRIVER_PROFILE=0 "$tour" > /dev/null
[ ! -e "$out" ] || { echo "a table written under UVM_DRIVER_PROFILE=0"; exit 1; }
echo "driver profile: $made handles made and released, the table written only where asked for"
