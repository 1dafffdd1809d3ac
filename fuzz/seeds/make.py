#!/usr/bin/env python3
"""Writes the seed inputs of the nbd_connection fuzz target (see its
header): one transmission input per command, one with all of them, and
option-phase inputs. Run from fuzz/: python3 seeds/make.py"""
import os
import struct

OUT = "seeds/nbd_connection"
IHAVEOPT = 0x49484156454F5054
REQ_MAGIC = 0x25609513
READ, WRITE, DISC, FLUSH, TRIM, CACHE, WZ, BS = range(8)
FUA, NO_HOLE, DF, REQ_ONE, FAST_ZERO = 1, 2, 4, 8, 16


def req(cmd, off=0, length=0, flags=0, payload=b""):
    return struct.pack(">IHHQQI", REQ_MAGIC, flags, cmd, 7, off, length) + payload


def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data


def name(n):
    return struct.pack(">I", len(n)) + n


COMMANDS = {
    "read": req(READ, 4096, 4096, DF),
    "write": req(WRITE, 8192, 512, FUA, b"\xab" * 512),
    "flush": req(FLUSH),
    "trim": req(TRIM, 0, 8192),
    "cache": req(CACHE, 0, 4096),
    "write_zeroes": req(WZ, 4096, 4096, NO_HOLE | FAST_ZERO),
    "block_status": req(BS, 0, 65536, REQ_ONE),
    "disc": req(DISC),
}
OPTIONS = {
    "list": opt(3),
    "info": opt(6, name(b"") + struct.pack(">HHH", 2, 0, 3)),
    "list_meta": opt(9, name(b"") + struct.pack(">I", 1) + name(b"base:")),
    "starttls": opt(5),
    "export_name": opt(1, b"ro"),
    "abort": opt(2),
}

os.makedirs(OUT, exist_ok=True)
for mode in (1, 3, 11):
    for cmd, data in COMMANDS.items():
        open(f"{OUT}/mode{mode}-{cmd}", "wb").write(bytes([mode]) + data)
    all_cmds = b"".join(v for k, v in COMMANDS.items() if k != "disc") + COMMANDS["disc"]
    open(f"{OUT}/mode{mode}-all", "wb").write(bytes([mode]) + all_cmds)
for o, data in OPTIONS.items():
    open(f"{OUT}/options-{o}", "wb").write(bytes([0]) + struct.pack(">I", 3) + data + opt(2))
# TLS required (mode bit 4): each option in clear, then STARTTLS and a
# ClientHello-sized run of bytes that are not one; and the GO prefix with
# every command after it (none may be served).
for o, data in OPTIONS.items():
    open(f"{OUT}/tls-require-{o}", "wb").write(bytes([16]) + struct.pack(">I", 3) + data + opt(2))
open(f"{OUT}/tls-require-starttls-garbage", "wb").write(
    bytes([16]) + struct.pack(">I", 3) + opt(5) + b"\x16\x03\x01" + bytes(200))
all_cmds = b"".join(v for k, v in COMMANDS.items() if k != "disc") + COMMANDS["disc"]
open(f"{OUT}/tls-require-mode17-all", "wb").write(bytes([17]) + all_cmds)
