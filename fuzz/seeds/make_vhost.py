#!/usr/bin/env python3
"""Writes the seed inputs of the vhost_request fuzz target (see its
header): one well-formed chain each for read, write, flush, get_id and
discard, in a 16-entry queue with the default ring addresses, and a read
in a queue of 12 entries (not a power of two: the queue stops).
Run from fuzz/: python3 seeds/make_vhost.py"""
import os
import struct

OUT = "seeds/vhost_request"
T_IN, T_OUT, T_FLUSH, T_GET_ID, T_DISCARD = 0, 1, 4, 8, 11
NEXT, WRITE = 1, 2
DESC, AVAIL = 0x0, 0x200
HDR, DATA, STATUS = 0x400, 0x600, 0x800


def desc(addr, length, flags, nxt):
    return struct.pack("<QIHH", addr, length, flags, nxt)


def seed(req_type, sector, data_desc, payload=b"", preamble=bytes([0, 4])):
    """A queue of 16 with one chain: header, the data descriptor (if
    any), the status byte; `payload` goes at DATA. `preamble`: the flags
    and queue size bytes."""
    descs = [(HDR, 16, 0)]
    if data_desc:
        descs.append((DATA,) + data_desc)
    descs.append((STATUS, 1, WRITE))
    mem = bytearray(STATUS + 1)
    for i, (addr, length, flags) in enumerate(descs):
        last = i == len(descs) - 1
        entry = desc(addr, length, flags | (0 if last else NEXT), 0 if last else i + 1)
        mem[DESC + 16 * i:DESC + 16 * (i + 1)] = entry
    mem[AVAIL:AVAIL + 6] = struct.pack("<HHH", 0, 1, 0)
    mem[HDR:HDR + 16] = struct.pack("<IIQ", req_type, 0, sector)
    mem[DATA:DATA + len(payload)] = payload
    return preamble + bytes(24) + bytes(mem)


SEEDS = {
    "read": seed(T_IN, 8, (512, WRITE)),
    "write": seed(T_OUT, 16, (512, 0), b"\xab" * 512),
    "flush": seed(T_FLUSH, 0, None),
    "get_id": seed(T_GET_ID, 0, (20, WRITE)),
    "discard": seed(T_DISCARD, 0, (16, 0), struct.pack("<QII", 32, 8, 0)),
    # Flags bit 6, size byte 11: a queue of 12, not a power of two (stops).
    "read_queue_of_12": seed(T_IN, 8, (512, WRITE), preamble=bytes([0x40, 11])),
}

os.makedirs(OUT, exist_ok=True)
for name, data in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
