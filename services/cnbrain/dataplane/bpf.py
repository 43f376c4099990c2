"""Loading an eBPF program into the kernel: the bpf(2) system call, BPF_PROG_LOAD.

Only what the netlab's headends need: a BPF_PROG_TYPE_LWT_XMIT program from its instructions,
as a file descriptor that a route then takes (`linux`), and the verifier's log when the
kernel refuses it. Needs CAP_BPF (root).
"""

import ctypes
import os
import platform
import struct

from cnbrain.domain.errors import Unavailable

_SYSCALL_BPF = {"x86_64": 321, "aarch64": 280}
_PROG_LOAD = 5
PROG_TYPE_LWT_XMIT = 12
_LOG_SIZE = 1 << 16
_ATTR_SIZE = 128
_INSN_SIZE = 8

_libc = ctypes.CDLL(None, use_errno=True)


class BpfError(Unavailable):
    """The kernel refused a program; the message has the verifier's last lines."""


def load_program(instructions: bytes, *, prog_type: int = PROG_TYPE_LWT_XMIT) -> int:
    """Load `instructions` as a GPL program of `prog_type`; its file descriptor (the caller
    closes it once a route holds the program). BpfError when the kernel refuses it."""
    number = _SYSCALL_BPF.get(platform.machine())
    if number is None:
        raise BpfError(f"bpf(2) is not known on {platform.machine()}")
    if not instructions or len(instructions) % _INSN_SIZE:
        raise BpfError(f"{len(instructions)} bytes are not whole eBPF instructions")
    code = ctypes.create_string_buffer(instructions, len(instructions))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(_LOG_SIZE)
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(
        "<IIQQIIQ",
        attr,
        0,
        prog_type,
        len(instructions) // _INSN_SIZE,
        ctypes.addressof(code),
        ctypes.addressof(license_),
        1,
        _LOG_SIZE,
        ctypes.addressof(log),
    )
    fd = int(_libc.syscall(number, _PROG_LOAD, attr, _ATTR_SIZE))
    if fd < 0:
        errno = ctypes.get_errno()
        said = log.value.decode(errors="replace").strip().splitlines()[-3:]
        raise BpfError(f"{os.strerror(errno)}: {' | '.join(said) or 'no verifier log'}")
    return fd
