#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""pjsnap.py SNAP EDIT...: rewrite a persistent mount's snapshot file the way
a tierfs with other habits, or a bug, would have written it, every CRC made
good again, for persist.bats. The layouts are persist/pj_i.h's.

  v1                 what a tierfs before format version 2 wrote: each
                     file's I_DATA holds the disk tier's chunk table alone
                     (the page maps after it dropped), header version 1
  bad-entry INO K    entry K of inode INO's chunk table says a chunk no
                     disk tier can have (meta word 1: no encoding)
  version            print the header's format version
"""

import struct
import sys

HDR = 56
I_DATA = 2
DATA_FIXED = 64


def crc32c(b, c=0):
    c ^= 0xFFFFFFFF
    for x in b:
        c = TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def table():
    t = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


TABLE = table()


def items(body):
    off = 0
    while off < len(body):
        typ, zero, n = struct.unpack_from("<HHI", body, off)
        yield typ, body[off + 8:off + 8 + n]
        off += 8 + n


def edit_data(payload, how):
    ino = struct.unpack_from("<Q", payload, 0)[0]
    mlen = struct.unpack_from("<I", payload, 56)[0]
    m = bytearray(payload[DATA_FIXED:DATA_FIXED + mlen])
    n = struct.unpack_from("<I", m, 0)[0]
    if how[0] == "v1":
        m = m[:4 + 12 * n]
    elif how[0] == "bad-entry" and ino == int(how[1]):
        k = int(how[2])
        assert k < n, "inode %d has %d chunks" % (ino, n)
        struct.pack_into("<I", m, 4 + 12 * k + 8, 1)
        how.append("done")
    out = bytearray(payload[:DATA_FIXED]) + m
    struct.pack_into("<I", out, 56, len(m))
    return bytes(out)


def main():
    path, how = sys.argv[1], sys.argv[2:]
    data = open(path, "rb").read()
    if how[0] == "version":
        print(struct.unpack_from("<I", data, 8)[0])
        return 0
    out = bytearray()
    off = HDR
    while off < len(data):
        n, crc, seq = struct.unpack_from("<IIQ", data, off)
        body = data[off + 16:off + 16 + n]
        nb = bytearray()
        for typ, payload in items(body):
            if typ == I_DATA:
                payload = edit_data(payload, how)
            nb += struct.pack("<HHI", typ, 0, len(payload)) + payload
        crc = crc32c(struct.pack("<Q", seq), crc32c(nb))
        out += struct.pack("<IIQ", len(nb), crc, seq) + nb
        off += 16 + n
    if how[0] == "bad-entry" and how[-1] != "done":
        sys.exit("pjsnap: no I_DATA of inode %s" % how[1])
    hdr = bytearray(data[:HDR])
    if how[0] == "v1":
        struct.pack_into("<I", hdr, 8, 1)
    struct.pack_into("<Q", hdr, 40, len(out))  # body_bytes
    struct.pack_into("<I", hdr, 52, crc32c(bytes(hdr[:52])))
    with open(path, "wb") as f:
        f.write(hdr + out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
