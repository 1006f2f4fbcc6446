"""The default thread count: the physical performance cores this process may use.

``os.cpu_count()`` also counts SMT siblings, efficiency cores and CPUs outside the affinity mask; a
compute-bound decoder spread over those runs slower than on the performance cores alone. Linux reads
/proc/cpuinfo and sysfs below ``root`` (so tests can point it at a fixture tree), macOS asks sysctl.
Whatever cannot be read or parsed falls back to the number of CPUs this process may run on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path


def allowed_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity mask where the platform has one, else all of them."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def parse_cpu_list(text: str) -> set[int]:
    """A kernel CPU list such as ``"0-3,8,10-11"`` as a set of CPU numbers."""
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def cpuinfo_cores(text: str) -> dict[int, tuple]:
    """Each processor of /proc/cpuinfo text that names its core, mapped to (physical id, core id).
    Blocks without a ``core id`` (some ARM kernels) are left out."""
    cores = {}
    for block in text.split("\n\n"):
        fields = dict(
            (key.strip(), value.strip())
            for key, _, value in (line.partition(":") for line in block.splitlines() if ":" in line)
        )
        if "processor" in fields and "core id" in fields:
            cores[int(fields["processor"])] = (fields.get("physical id"), fields["core id"])
    return cores


def _read(path: Path) -> str | None:
    """A file's text, or None where it cannot be read (most often: this kernel does not have it)."""
    try:
        return path.read_text()
    except OSError:
        return None


def efficiency_cpus(allowed: set[int], root: Path) -> set[int]:
    """The ``allowed`` CPUs that are efficiency cores: Intel hybrid E-cores (cpu_atom; the P-cores are in
    cpu_core), or on ARM big.LITTLE those below the highest cpu_capacity. Empty where the kernel tells neither."""
    atom = _read(root / "sys/devices/cpu_atom/cpus")
    if atom is not None:
        return allowed & parse_cpu_list(atom)
    capacity = {cpu: _read(root / f"sys/devices/system/cpu/cpu{cpu}/cpu_capacity") for cpu in allowed}
    if not capacity or None in capacity.values():
        return set()
    values = {cpu: int(text) for cpu, text in capacity.items()}
    top = max(values.values())
    return {cpu for cpu, value in values.items() if value < top}


def linux_cores(allowed: Iterable[int], root: str | Path = "/") -> int:
    """The physical performance cores among the ``allowed`` CPUs, read from /proc/cpuinfo and sysfs below
    ``root``. Raises ValueError on a file it cannot parse."""
    root, allowed = Path(root), set(allowed)
    cpu_dir = root / "sys/devices/system/cpu"
    named = cpuinfo_cores(_read(root / "proc/cpuinfo") or "")

    def core_of(cpu: int) -> tuple:
        """The core ``cpu`` belongs to: from cpuinfo, else its lowest SMT sibling, else the CPU itself."""
        if cpu in named:
            return named[cpu]
        siblings = _read(cpu_dir / f"cpu{cpu}/topology/thread_siblings_list")
        return ("cpu", min(parse_cpu_list(siblings)) if siblings else cpu)

    performance = allowed - efficiency_cpus(allowed, root)
    return len({core_of(cpu) for cpu in performance or allowed})


def _sysctl(name: str) -> int | None:
    """An integer sysctl value (macOS), or None where sysctl does not answer."""
    out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5)
    return int(out.stdout) if out.returncode == 0 and out.stdout.strip() else None


def macos_cores() -> int | None:
    """The physical performance cores on macOS (perflevel0 on Apple silicon; hw.physicalcpu on Intel Macs)."""
    return _sysctl("hw.perflevel0.physicalcpu") or _sysctl("hw.physicalcpu")


def default_threads(allowed: Iterable[int] | None = None, root: str | Path = "/", platform: str = sys.platform) -> int:
    """The physical performance cores this process may use, at least 1; the number of allowed CPUs where
    this platform or machine does not tell. Never raises."""
    allowed = set(allowed_cpus() if allowed is None else allowed)
    try:
        if platform.startswith("linux"):
            cores = linux_cores(allowed, root)
        elif platform == "darwin":
            cores = macos_cores()
        else:
            cores = None
    except (OSError, ValueError, subprocess.SubprocessError):
        cores = None
    return max(1, min(cores or len(allowed), len(allowed)))


def available_memory(root: str | Path = "/", platform: str = sys.platform) -> int | None:
    """Bytes of memory available to a new allocation now (Linux: MemAvailable; macOS: the machine's memory,
    halved, as it reports no such figure), or None where the platform does not tell. Never raises."""
    try:
        if platform.startswith("linux"):
            text = _read(Path(root) / "proc/meminfo") or ""
            kib = next((int(line.split()[1]) for line in text.splitlines() if line.startswith("MemAvailable:")), None)
            return kib * 1024 if kib else None
        if platform == "darwin":
            total = _sysctl("hw.memsize")
            return total // 2 if total else None
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return None
