#!/bin/sh
# Gives an unprivileged ublk device's nodes to the device's owner: the
# helper the administrator's udev rule runs when /dev/ublkcN or /dev/ublkbN
# appears (README, "ublk without root").
#
#   scripts/ublk-chown.sh NAME [ACTION]
#
# NAME is the node's kernel name (ublkc3, ublkb3: udev's %k); ACTION is
# udev's action (%E{ACTION} or $env{ACTION}), "add" when left out. On
# "add", the script asks the kernel for the device's info (`mqblk ublk info
# N`: GET_DEV_INFO2, which root may send for any device) and, when the
# device is unprivileged (UBLK_F_UNPRIVILEGED_DEV), sets /dev/NAME's owner
# and group to the owner_uid and owner_gid the kernel recorded at ADD_DEV
# (the adding user's); privileged devices' nodes stay root's. Other actions
# do nothing (the kernel removes the nodes). Needs root; MQBLK names the
# mqblk binary (default: mqblk on PATH).
#
# The kernel creates both nodes owned by root, mode 0600; ublk's server
# waits for /dev/ublkcN to become its own before it sends another command
# (the kernel checks the caller's access to that node), and for
# /dev/ublkbN before it announces the device.
#
# Exit status: 0 when done or nothing to do, 1 when the kernel's answer or
# chown failed, 2 for a bad NAME.
#
# SPDX-License-Identifier: MIT OR Apache-2.0
set -eu

mqblk=${MQBLK:-mqblk}
name=${1:-}
action=${2:-add}

case "$name" in
  ublkc[0-9]* | ublkb[0-9]*) id=${name#ublk?} ;;
  *) echo "ublk-chown.sh: NAME must be ublkcN or ublkbN, not '$name'" >&2; exit 2 ;;
esac
case "$id" in
  *[!0-9]*) echo "ublk-chown.sh: '$name' has no device number" >&2; exit 2 ;;
esac
[ "$action" = add ] || exit 0

# "unprivileged yes|no" and "owner UID:GID" lines of `mqblk ublk info`.
info=$("$mqblk" ublk info "$id") || { echo "ublk-chown.sh: no info for ublk device $id" >&2; exit 1; }
unprivileged=$(printf '%s\n' "$info" | awk '$1 == "unprivileged" { print $2 }')
owner=$(printf '%s\n' "$info" | awk '$1 == "owner" { print $2 }')
[ "$unprivileged" = yes ] || exit 0
case "$owner" in
  [0-9]*:[0-9]*) ;;
  *) echo "ublk-chown.sh: device $id: owner '$owner' is not UID:GID" >&2; exit 1 ;;
esac
chown "$owner" "/dev/$name"
