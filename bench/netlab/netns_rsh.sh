#!/bin/sh
# Open MPI "remote shell" agent for the network lab: mpirun (started inside host 0's
# namespace) calls `netns_rsh.sh [ssh-like options] HOST COMMAND...`; HOST is a lab address
# <subnet>.<K>, and the command runs in namespace ${NETLAB_PREFIX:-nczl}-h<K-1> through
# `ip netns exec` (root), instead of ssh.
while [ $# -gt 0 ]; do
  case "$1" in
    -x|-a|-T|-q|-n) shift ;;
    -o|-l|-p) shift 2 ;;
    *) break ;;
  esac
done
host="$1"; shift
last=${host##*.}
ns="${NETLAB_PREFIX:-nczl}-h$((last - 1))"
exec ip netns exec "$ns" /bin/sh -c "$*"
