# Shared by the scripts/reference_*.sh runners (sourced, not run): `timed NAME LIMIT CMD...`
# runs CMD with a time limit, its output in $work/NAME.log, and appends its exit code and wall
# seconds to $work/steps.log (and stdout). The caller sets $work.
timed() {
  local name=$1 limit=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$work/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%-24s rc=%-3s %8.2f s\n' "$name" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" | tee -a "$work/steps.log"
}
