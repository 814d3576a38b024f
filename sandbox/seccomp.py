"""The seccomp filter of a sandbox without network: no socket but AF_UNIX, no io_uring.

The empty network namespace already leaves such a sandbox nothing to reach; the filter also
refuses its own loopback (a socket of any other family fails) and io_uring, which could create
sockets behind the filter's back. Pure Python: the classic BPF program is assembled here, so
no compiler or libseccomp binding is needed.
"""

from __future__ import annotations

import platform
import struct
from functools import lru_cache

_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_EAFNOSUPPORT = 97
_ENOSYS = 38
_EPERM = 1
_AF_UNIX = 1
_X32_SYSCALL_BIT = 0x40000000
# (audit arch, socket, io_uring_setup) per machine.
_SYSCALLS = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


@lru_cache(maxsize=1)
def socket_filter_program() -> bytes | None:
    """socket(2) with any family but AF_UNIX fails with EAFNOSUPPORT; io_uring_setup(2)
    fails with EPERM; syscalls of a foreign ABI (x32, 32-bit compat) fail with ENOSYS.
    None on machines this does not know (the empty network namespace still holds there)."""
    known = _SYSCALLS.get(platform.machine())
    if known is None:
        return None
    arch, socket_nr, io_uring_setup_nr = known
    program = [
        _insn(_BPF_LD_W_ABS, 0, 0, 4),  # 0: A = arch
        _insn(_BPF_JEQ_K, 1, 0, arch),  # 1: native ABI? skip the next
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),  # 2: foreign ABI
        _insn(_BPF_LD_W_ABS, 0, 0, 0),  # 3: A = syscall number
        _insn(_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT),  # 4: x32 ABI?
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS),  # 5
        _insn(_BPF_JEQ_K, 0, 1, io_uring_setup_nr),  # 6
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _EPERM),  # 7
        _insn(_BPF_JEQ_K, 0, 3, socket_nr),  # 8: socket? else allow (12)
        _insn(_BPF_LD_W_ABS, 0, 0, 16),  # 9: A = family (low 32 bits of args[0])
        _insn(_BPF_JEQ_K, 1, 0, _AF_UNIX),  # 10: AF_UNIX? allow (12)
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _EAFNOSUPPORT),  # 11
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),  # 12
    ]
    return b"".join(program)
