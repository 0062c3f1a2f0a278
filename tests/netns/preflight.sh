# Sourced by the netns tests: skip() (exit 77, which CTest reports as skipped with the reason)
# and netns_preflight PROGRAM..., which skips where namespaces cannot be made (not root, no
# iproute2, a kernel or container without network namespaces, veth or bridges), fails when a
# program is not an executable file, and prints what scripts/netns-cluster found. Sets $tool.
tool=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/netns-cluster
readonly skip_code=77

skip() {
  echo "SKIPPED: $*"
  exit "$skip_code"
}

netns_preflight() {
  ((EUID == 0)) || skip "needs root to create network namespaces (running as uid $EUID)"
  local program
  for program in "$@"; do
    [[ -x $program ]] || { echo "FAIL: $program is not an executable file"; exit 1; }
  done
  local check_code=0 check_out
  check_out=$("$tool" check 2>&1) || check_code=$?
  if ((check_code == skip_code)); then skip "$check_out"; fi
  if ((check_code != 0)); then
    echo "FAIL: netns-cluster check exited with $check_code: $check_out"
    exit 1
  fi
  echo "$check_out"
}
