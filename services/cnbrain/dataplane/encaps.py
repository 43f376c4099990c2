"""SRv6 encapsulation (H.Encaps, RFC 8986) as an eBPF program for a route, pure: bytes only.

A headend's route to a job address carries a lightweight-tunnel eBPF program (`encap bpf
xmit`) that pushes an outer IPv6 header and a Segment Routing Header (RFC 8754) in front of
each packet (`bpf_lwt_push_encap` with BPF_LWT_ENCAP_IP) and hands it back to the kernel to
be routed on its new destination, the first SID (BPF_LWT_REROUTE). The kernel then forwards it
as any SRv6 packet: every SID on the way is a local address of its node, whose endpoint
processing moves to the next SID, and the last SID's node decapsulates it.

It does what `ip -6 route add ... encap seg6 mode encap` does, with eBPF for routes rather
than the kernel's SRv6 lightweight tunnels (CONFIG_IPV6_SEG6_LWTUNNEL), which it does not
need. The program is generated per segment list, the header written into it as constants:
3 instructions per 8 bytes of header and 16 more, 34 + 6 per SID (70 for a list of 6 SIDs).
"""

import ipaddress
import struct
from collections.abc import Sequence

MAX_SIDS = 13
"""SIDs of one segment list at most: a header of 256 bytes (`header_room`), the most the
kernel lets a lightweight-tunnel eBPF program push (LWT_BPF_MAX_HEADROOM)."""

HOP_LIMIT = 64
NEXT_IPV6 = 41
NEXT_ROUTING = 43
ROUTING_SRH = 4

# eBPF opcodes and constants (linux/bpf.h).
_MOV64_REG = 0xBF
_MOV64_IMM = 0xB7
_ADD64_IMM = 0x07
_LD_IMM64 = 0x18
_STX_DW = 0x7B
_STX_H = 0x6B
_LDX_W = 0x61
_TO_BE = 0xDC
_CALL = 0x85
_JNE_IMM = 0x55
_EXIT = 0x95
_HELPER_LWT_PUSH_ENCAP = 73
_LWT_ENCAP_IP = 2
_LWT_REROUTE = 128
_DROP = 2
_SKB_LEN = 0
"""Offset of `len` in `struct __sk_buff`."""

_R0, _R1, _R2, _R3, _R4, _R6, _R10 = 0, 1, 2, 3, 4, 6, 10


def header_room(sids: int) -> int:
    """Bytes of the outer IPv6 header and SRH of a segment list of `sids` SIDs."""
    return 40 + 8 + 16 * sids


def encapsulation(source: str, sids: Sequence[str]) -> bytes:
    """The outer IPv6 header (from `source` to the first SID, payload length 0: the program
    writes it per packet) and the SRH carrying `sids`, in travel order, with segments left
    pointing at the first. ValueError for no SID, more than MAX_SIDS, or an address that is
    not IPv6."""
    if not 1 <= len(sids) <= MAX_SIDS:
        raise ValueError(f"a segment list has 1 to {MAX_SIDS} SIDs, not {len(sids)}")
    packed = [ipaddress.IPv6Address(sid).packed for sid in sids]
    last = len(sids) - 1
    srh = struct.pack("!BBBBBBH", NEXT_IPV6, 2 * len(sids), ROUTING_SRH, last, last, 0, 0)
    srh += b"".join(reversed(packed))
    outer = struct.pack("!IHBB", 6 << 28, 0, NEXT_ROUTING, HOP_LIMIT)
    outer += ipaddress.IPv6Address(source).packed + packed[0]
    return outer + srh


def headend_program(header: bytes) -> bytes:
    """The eBPF instructions (BPF_PROG_TYPE_LWT_XMIT) that push `header` (from
    `encapsulation`) in front of a packet, its payload length set to the packet's, and
    reroute it; a packet it cannot encapsulate is dropped."""
    size = len(header)
    if size % 8 or not 48 <= size <= header_room(MAX_SIDS):
        raise ValueError(f"an encapsulation of {size} bytes is not one of a segment list")
    code = [_insn(_MOV64_REG, _R6, _R1)]
    for at in range(0, size, 8):
        code.append(_ld_imm64(_R1, int.from_bytes(header[at : at + 8], "little")))
        code.append(_insn(_STX_DW, _R10, _R1, off=at - size))
    code += [
        _insn(_LDX_W, _R2, _R6, off=_SKB_LEN),
        _insn(_ADD64_IMM, _R2, imm=size - 40),
        _insn(_TO_BE, _R2, imm=16),
        _insn(_STX_H, _R10, _R2, off=4 - size),
        _insn(_MOV64_REG, _R1, _R6),
        _insn(_MOV64_IMM, _R2, imm=_LWT_ENCAP_IP),
        _insn(_MOV64_REG, _R3, _R10),
        _insn(_ADD64_IMM, _R3, imm=-size),
        _insn(_MOV64_IMM, _R4, imm=size),
        _insn(_CALL, imm=_HELPER_LWT_PUSH_ENCAP),
        _insn(_JNE_IMM, _R0, off=2, imm=0),
        _insn(_MOV64_IMM, _R0, imm=_LWT_REROUTE),
        _insn(_EXIT),
        _insn(_MOV64_IMM, _R0, imm=_DROP),
        _insn(_EXIT),
    ]
    return b"".join(code)


def _insn(code: int, dst: int = 0, src: int = 0, *, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | (src << 4), off, imm)


def _ld_imm64(dst: int, value: int) -> bytes:
    return struct.pack("<BBhI", _LD_IMM64, dst, 0, value & 0xFFFFFFFF) + struct.pack(
        "<BBhI", 0, 0, 0, value >> 32
    )
