"""The Python package's view of the ABI, checked against include/tierfs.h.

tierfs.device packs the ioctl structs with ``struct`` by hand; this reads
the header itself (the structs, the command numbers, the flags) and fails
when the two differ, so a change to the header that Python does not follow
is a test failure rather than an EINVAL on a GPU machine. Every
``struct.Struct`` of the module must name a struct of the header
(``_EXPORT`` is ``struct tfs_ioc_export``).
"""
import os
import re
import struct

import tierfs.device as dev

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "include",
                      "tierfs.h")

_CODES = {"uint8_t": "B", "int32_t": "i", "uint32_t": "I", "int64_t": "q",
          "uint64_t": "Q"}


def _header():
    with open(HEADER) as f:
        text = f.read()
    # Comments out, so that a field's comment cannot look like a field.
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def _structs(text):
    """{name: format} of every struct tfs_ioc_*, little-endian, each array
    of bytes one 's' item and every other array expanded."""
    out = {}
    for name, body in re.findall(r"struct (tfs_ioc_\w+)\s*\{(.*?)\};", text,
                                 flags=re.S):
        fmt = "<"
        for ctype, field, count in re.findall(
                r"(\w+)\s+(\w+)\s*(?:\[(\d+)\])?\s*;", body):
            assert ctype in _CODES, "%s.%s: type %s" % (name, field, ctype)
            n = int(count) if count else 1
            if ctype == "uint8_t" and count:
                fmt += "%ds" % n
            else:
                fmt += _CODES[ctype] * n
        out[name] = fmt
    return out


def _expand(fmt):
    """'<II2Q16s' as '<IIQQ16s': counts spelled out but for strings."""
    out = fmt[0]
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt[1:]):
        if code == "s":
            out += count + code
        else:
            out += code * (int(count) if count else 1)
    return out


def _defines(text):
    return dict(re.findall(r"#define\s+(TFS_\w+)\s+(0x[0-9a-fA-F]+|\d+)u?\b",
                           text))


def test_every_struct_matches_the_header():
    structs = _structs(_header())
    assert "tfs_ioc_export" in structs, "the header parser found nothing"
    seen = 0
    for name in dir(dev):
        obj = getattr(dev, name)
        if not isinstance(obj, struct.Struct):
            continue
        cname = "tfs_ioc" + name.lower()
        assert cname in structs, \
            "tierfs.device.%s names no struct %s in tierfs.h" % (name, cname)
        assert _expand(obj.format) == _expand(structs[cname]), \
            "tierfs.device.%s is %s, tierfs.h's struct %s is %s" % (
                name, obj.format, cname, structs[cname])
        seen += 1
    assert seen >= 4


def test_commands_match_the_header():
    text = _header()
    dirs = {"_IO": 0, "_IOW": 1, "_IOR": 2, "_IOWR": 3}
    structs = _structs(text)
    cmds = {}
    for name, how, nr, sname in re.findall(
            r"#define\s+(TFS_IOC_\w+)\s+(_IO\w*)\(TFS_IOC_MAGIC,\s*(\d+),"
            r"\s*struct\s+(\w+)\)", text):
        size = struct.calcsize(structs[sname])
        cmds[name[len("TFS_"):]] = (dirs[how] << 30) | (size << 16) | \
            (0xF7 << 8) | int(nr)
    assert "IOC_EXPORT" in cmds
    for name in dir(dev):
        if name.startswith("IOC_"):
            assert name in cmds, "tierfs.device.%s: no TFS_%s" % (name, name)
            assert getattr(dev, name) == cmds[name], name


def test_flags_match_the_header():
    defs = _defines(_header())
    for py, c in (("EXPORT_WRITE", "TFS_EXPORT_WRITE"),
                  ("RELEASE_UNMAPPED", "TFS_RELEASE_UNMAPPED"),
                  ("RECLAIM_UUID", "TFS_RECLAIM_UUID"),
                  ("PREFETCH_WAIT", "TFS_PREFETCH_WAIT")):
        assert getattr(dev, py) == int(defs[c], 0), py
    states = dict(re.findall(r"TFS_PREFETCH_(\w+)\s*=\s*(\d+)", _header()))
    for value, name in dev._PREFETCH_STATES.items():
        assert int(states[name.upper()]) == value, name
    handles = dict(re.findall(r"TFS_HANDLE_(\w+)\s*=\s*(\d+)", _header()))
    for name, value in handles.items():
        if hasattr(dev, "HANDLE_" + name):
            assert getattr(dev, "HANDLE_" + name) == int(value), name
