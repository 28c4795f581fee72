#!/usr/bin/env bash
# Two hosts on one machine: two network namespaces joined by a veth pair (10.213.0.1/30 and
# 10.213.0.2/30, beside their own loopback only), each with its own hostname (a UTS namespace),
# and one MPI rank in each, launched as mpirun launches across hosts: mpirun runs in host A with
# `--host 10.213.0.1,10.213.0.2` and starts host B's daemon through plm_rsh_agent (a script that
# runs the daemon's command line in B, with a login's environment, where ssh would log in); the
# ranks talk over TCP only (pml ob1, btl tcp,self), pinned with the daemons to the veth's subnet.
# Checks:
# - lucid_runtime_tp_mpitest (ctest mpi/tp_generate's check: TP 2 and TP 2 + EP 2 logits within
#   1e-5 of the single-process run's and the same greedy continuations, for the three tiny
#   fixtures) passes with rank 0 in namespace A and rank 1 in namespace B (each rank prints its
#   /proc/self/ns/net and hostname before it starts);
# - `lucid generate --tp-size 2 --ep-size 2` across the two prints the single-process command's
#   tokens, and its world lines put rank 0 on host A's hostname and rank 1 on host B's;
# - the veth carried the traffic: its kernel byte counters grew by over 256 KiB each way (starting
#   and finishing MPI alone moves about 4 KB; the checks move about 700 KB).
# Every mpirun and lucid run is bounded (timeout, inside ctest's TIMEOUT); on exit, also on SIGINT
# or SIGTERM, a trap kills every process in the two namespaces and deletes them (the veth goes
# with them) and the scratch directory (OpenMPI's session directories are in it). The root
# namespace is not touched. The namespaces and scratch directory of an earlier run killed with
# SIGKILL (no trap ran; its pid is gone) are deleted at the start.
# Exit 77 (ctest's skip) with the reason where the machine cannot do this: not root, no ip or
# unshare, or the kernel refuses a network namespace, a veth pair or a UTS namespace. Any failure
# after that fails the test (exit 1).
# Usage: two_hosts_test.sh LUCID TP_MPITEST MPIRUN FIXTURES_DIR (ctest mpi/two_hosts).
set -u
lucid=$1 tp_test=$2 mpirun=$3 fixtures=$4
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$EUID" = 0 ] || skip "ip netns needs root (running as uid $EUID)"
for tool in ip unshare timeout; do
  command -v $tool >/dev/null || skip "no '$tool' on PATH"
done

prefix=lucid2h
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-[ab]-[0-9]+$"); do
  if ! kill -0 "${ns##*-}" 2>/dev/null; then
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null && echo "deleted $ns, left by a killed run"
  fi
done
for dir in /tmp/"$prefix"-*.*; do
  pid=${dir#/tmp/"$prefix"-} pid=${pid%%.*}
  [[ -d $dir && $pid =~ ^[0-9]+$ ]] && ! kill -0 "$pid" 2>/dev/null && rm -rf "$dir"
done

ns_a=$prefix-a-$$ ns_b=$prefix-b-$$
veth_a=l2h$$a veth_b=l2h$$b  # at most 15 characters
addr_a=10.213.0.1 addr_b=10.213.0.2 subnet=10.213.0.0/30
host_a=lucid-a-$$ host_b=lucid-b-$$
min_bytes=262144
work=$(mktemp -d /tmp/$prefix-$$.XXXXXX) || fail "mktemp"
made=() child=
cleanup() {
  local ns
  [ -n "$child" ] && kill -9 -- -"$child" 2>/dev/null  # timeout's process group
  for ns in "${made[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  for ns in "${made[@]}"; do
    ip netns del "$ns" 2>/dev/null || echo "cleanup: could not delete namespace $ns"
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# OUT SECONDS COMMAND...: runs COMMAND (stdout to OUT, stderr to OUT.err) for at most SECONDS, in
# the background so that a signal to this script is handled at once; returns its status.
bounded() {
  local out=$1 seconds=$2 rc
  shift 2
  timeout -k 5 "$seconds" "$@" >"$out" 2>"$out.err" &
  child=$!
  wait $child
  rc=$?
  child=
  return $rc
}

for ns in $ns_a $ns_b; do
  err=$(ip netns add "$ns" 2>&1) || skip "ip netns add $ns refused: $err"
  made+=("$ns")
done
err=$(ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" 2>&1) ||
  skip "ip link add (veth pair) refused: $err"
err=$(ip netns exec "$ns_a" unshare --uts true 2>&1) || skip "unshare --uts refused: $err"
ip -n "$ns_a" addr add $addr_a/30 dev "$veth_a" || fail "address on $veth_a"
ip -n "$ns_b" addr add $addr_b/30 dev "$veth_b" || fail "address on $veth_b"
for ns in $ns_a $ns_b; do
  ip -n "$ns" link set lo up || fail "lo up in $ns"
done
ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up || fail "veth up"

# in_host NS HOST COMMAND...: COMMAND in network namespace NS with hostname HOST.
cat >"$work/in_host" <<'EOF'
#!/bin/sh
ns=$1 host=$2; shift 2
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
EOF
# mpirun's plm_rsh_agent, called as ssh is (`agent HOST WORDS...`): the daemon's command line in
# that host's namespace, with PATH and HOME only (what the ranks need comes through mpirun's -x).
cat >"$work/agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
  $addr_b) exec env -i PATH="\$PATH" HOME="\$HOME" "$work/in_host" $ns_b $host_b sh -c "\$*" ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
EOF
# where COMMAND...: prints the rank's network namespace and hostname, then runs COMMAND.
cat >"$work/where" <<'EOF'
#!/bin/sh
echo "rank $OMPI_COMM_WORLD_RANK: netns $(readlink /proc/self/ns/net) host $(hostname)" >&2
exec "$@"
EOF
chmod +x "$work/in_host" "$work/agent" "$work/where"

# shellcheck disable=SC2054  # the commas are mpirun's
mpi=("$work/in_host" "$ns_a" "$host_a" "$mpirun" --allow-run-as-root --host "$addr_a,$addr_b" -np 2
     --mca plm_rsh_agent "$work/agent" --mca plm_rsh_no_tree_spawn 1 --mca orte_tmpdir_base "$work"
     --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$subnet"
     --mca oob_tcp_if_include "$subnet"
     -x OMP_NUM_THREADS=1)
bytes() { ip netns exec "$ns_a" cat "/sys/class/net/$veth_a/statistics/$1"; }
tx0=$(bytes tx_bytes) rx0=$(bytes rx_bytes)
inode_a=$(ip netns exec "$ns_a" readlink /proc/self/ns/net)
inode_b=$(ip netns exec "$ns_b" readlink /proc/self/ns/net)
failed=0
fail_later() { echo "FAIL: $*"; failed=1; }

# 1. The tensor-parallel check, one rank in each namespace.
bounded "$work/tp" 90 "${mpi[@]}" "$work/where" "$tp_test" --gtest_color=no
rc=$?
cat "$work/tp.err"
if [ $rc -ne 0 ]; then
  cat "$work/tp"
  fail_later "lucid_runtime_tp_mpitest across the two namespaces: exit $rc"
else
  grep -E "TP 2 EP|PASSED" "$work/tp"
fi
for m in tiny_glm_moe_dsa tiny_deepseek_v32 tiny_deepseek_v3; do
  for ep in 1 2; do
    grep -q "^$m TP 2 EP $ep: greedy 12 tokens equal" "$work/tp" || fail_later "no $m EP $ep"
  done
done
grep -qxF "rank 0: netns $inode_a host $host_a" "$work/tp.err" || fail_later "rank 0 not in $ns_a"
grep -qxF "rank 1: netns $inode_b host $host_b" "$work/tp.err" || fail_later "rank 1 not in $ns_b"

# 2. `lucid generate --tp-size 2 --ep-size 2` across the two against the single-process command.
# shellcheck disable=SC2054
args=(generate --model-path "$fixtures/tiny_deepseek_v3" --prompt-ids 1,17,42,99,3,200,7,64
      --max-new-tokens 10 --cpu-kernels reference)
bounded "$work/want" 30 "$lucid" "${args[@]}" || fail "single-process lucid generate: exit $?"
bounded "$work/got" 60 "${mpi[@]}" "$lucid" "${args[@]}" --tp-size 2 --ep-size 2
rc=$?
cat "$work/got.err"
want=$(cat "$work/want") got=$(cat "$work/got")
if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
  fail_later "lucid generate across the two (exit $rc): got '$got', want '$want'"
else
  echo "ok lucid generate tp 2 ep 2 across the two: $got"
fi
for rank_host in "0 $host_a" "1 $host_b"; do
  grep -q "^lucid generate: rank ${rank_host% *} of 2 on ${rank_host#* }: tp 2, ep 2" \
    "$work/got.err" || fail_later "no world line for rank ${rank_host% *} on ${rank_host#* }"
done

# 3. The traffic went over the veth, both ways.
tx=$(($(bytes tx_bytes) - tx0)) rx=$(($(bytes rx_bytes) - rx0))
echo "veth $veth_a: $tx bytes sent, $rx bytes received"
[ $tx -gt $min_bytes ] && [ $rx -gt $min_bytes ] || fail_later "under $min_bytes bytes each way"
exit $failed
