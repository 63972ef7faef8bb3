"""bench/fork_probe/thp.py - issue 24 experiment: back a zygote's
anonymous memory with transparent huge pages after its imports, so a
fork copies one PMD entry per 2 MiB instead of 512 PTEs.

collapse() marks every private anonymous writable mapping MADV_HUGEPAGE
and asks the kernel to collapse it now (MADV_COLLAPSE, Linux >= 6.1; it
works whatever /sys/kernel/mm/transparent_hugepage/enabled says except
"never", so it needs no /sys in the sandbox).  Returns (mappings, bytes
advised, errors)."""
import ctypes

MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def collapse():
    n = size = errs = 0
    with open("/proc/self/maps") as f:
        lines = f.readlines()
    for line in lines:
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        perms = parts[1]
        path = parts[5] if len(parts) > 5 else ""
        if perms[:2] != "rw" or perms[3] != "p":
            continue
        if path and path != "[heap]":
            continue
        # the 2 MiB-aligned part only
        a = (lo + (1 << 21) - 1) & ~((1 << 21) - 1)
        b = hi & ~((1 << 21) - 1)
        if b <= a:
            continue
        n += 1
        size += b - a
        if _libc.madvise(a, b - a, MADV_HUGEPAGE) != 0:
            errs += 1
            continue
        if _libc.madvise(a, b - a, MADV_COLLAPSE) != 0:
            errs += 1
    return n, size, errs
