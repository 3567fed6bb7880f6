"""Per-sandbox control groups: a hard memory limit, a process limit and the CPU time of every descendant.

The controller (never the sandbox) creates one group per session under its own cgroup and one child group per
sandbox, writes the limits, moves the sandbox in right after the fork (before it receives its candidate), reads
its CPU time and its member processes, and removes it when the sandbox is closed. Both hierarchies are handled:
cgroup v2 (``memory.max``, ``pids.max``, ``cpu.stat``, ``cgroup.kill``) where the memory and pids controllers
can be enabled below the controller's cgroup, else cgroup v1 (``memory.limit_in_bytes``, ``pids.max``,
``cpuacct.usage``), one hierarchy per controller, as on hybrid hosts; where no hierarchy has a pids controller (the
GPU host's v2 has none), a memory-only group, and the jail bounds the tasks otherwise (:mod:`.task_limit`). Where
nothing is writable the jail falls back to rlimits (docs/design/threat-model.md#the-jail).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


class CgroupUnavailable(RuntimeError):
    pass


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fstype, super options) of every cgroup mount, from /proc/self/mountinfo."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
                    out.append((fields[4].replace("\\040", " "), rfields[0], set(rfields[2].split(","))))
    except OSError:
        pass
    return out


def _own_paths() -> dict[str, str]:
    """controller name (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _hid, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in (ctrls.split(",") if ctrls else [""]):
                    out[c] = path
    except OSError:
        pass
    return out


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@dataclass
class SandboxCgroup:
    """One sandbox's group (one directory per hierarchy: one for v2, up to three for v1)."""

    dirs: dict[str, Path]  # "memory" | "pids" | "cpu" | "v2" -> directory
    version: str

    def add(self, pid: int) -> None:
        for d in set(self.dirs.values()):
            _write(d / "cgroup.procs", str(pid))

    def procs(self) -> list[int]:
        d = self.dirs.get("v2") or self.dirs.get("pids") or self.dirs.get("memory")
        try:
            return [int(x) for x in (d / "cgroup.procs").read_text().split()] if d else []
        except (OSError, ValueError):
            return []

    def cpu_ns(self) -> Optional[int]:
        """CPU time of every process that ever ran in the group (exited ones included)."""
        try:
            if "v2" in self.dirs:
                for line in (self.dirs["v2"] / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) * 1000
                return None
            if "cpu" in self.dirs:
                return int((self.dirs["cpu"] / "cpuacct.usage").read_text())
        except (OSError, ValueError):
            return None
        return None

    def oom_killed(self) -> bool:
        """Did the kernel kill a member for going over the memory limit?"""
        try:
            if "v2" in self.dirs:
                for line in (self.dirs["v2"] / "memory.events").read_text().splitlines():
                    if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                        return True
                return False
            if "memory" in self.dirs:  # the cgroup's own count of kills (memory.failcnt stays 0 on some kernels)
                return any(ln.startswith("oom_kill ") and int(ln.split()[1]) > 0
                           for ln in (self.dirs["memory"] / "memory.oom_control").read_text().splitlines())
        except (OSError, ValueError, IndexError):
            return False
        return False

    def limit_reached(self) -> bool:
        """Did the members' memory reach the limit at least once (the kernel then reclaims, and a process that
        keeps allocating stalls there before it is killed)? v2: ``memory.events`` ``max``; v1: the high-water mark
        at the limit (``memory.failcnt`` stayed 0 on this project's CI VM while a member was killed at the limit)."""
        try:
            if "v2" in self.dirs:
                return any(line.startswith("max ") and int(line.split()[1]) > 0
                           for line in (self.dirs["v2"] / "memory.events").read_text().splitlines())
            if "memory" in self.dirs:
                d = self.dirs["memory"]
                return (int((d / "memory.failcnt").read_text()) > 0
                        or int((d / "memory.max_usage_in_bytes").read_text())
                        >= int((d / "memory.limit_in_bytes").read_text()))
        except (OSError, ValueError, IndexError):
            return False
        return False

    def peak_bytes(self) -> Optional[int]:
        try:
            if "v2" in self.dirs:
                p = self.dirs["v2"] / "memory.peak"
                return int(p.read_text()) if p.exists() else None
            if "memory" in self.dirs:
                return int((self.dirs["memory"] / "memory.max_usage_in_bytes").read_text())
        except (OSError, ValueError):
            return None
        return None

    def kill(self) -> None:
        if "v2" in self.dirs:
            try:
                _write(self.dirs["v2"] / "cgroup.kill", "1")
                return
            except OSError:
                pass
        for pid in self.procs():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def remove(self, wait_s: float = 1.0) -> bool:
        """rmdir every directory once its members are gone (they exit asynchronously after a kill)."""
        deadline = time.monotonic() + wait_s
        left = set(self.dirs.values())
        while left:
            for d in list(left):
                try:
                    d.rmdir()
                    left.discard(d)
                except FileNotFoundError:
                    left.discard(d)
                except OSError:
                    pass
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        return not left


class CgroupSession:
    """The session's parent group(s). :meth:`create` makes one :class:`SandboxCgroup` per sandbox."""

    def __init__(self, version: str, roots: dict[str, Path], memory_bytes: int, pids_max: int,
                 pids: bool = True) -> None:
        self.version = version
        self.roots = roots
        self.memory_bytes = memory_bytes
        self.pids_max = pids_max
        #: False: a memory-only group (no pids controller here); the jail bounds the tasks otherwise
        self.pids = pids
        self._n = 0

    @property
    def kind(self) -> str:
        """The plan's ``limits``: "cgroup v2", or "cgroup v2 memory" without a pids controller."""
        return f"cgroup {self.version}" + ("" if self.pids else " memory")

    @classmethod
    def open(cls, memory_bytes: int, pids_max: int) -> "CgroupSession":
        """Create the session's group, or :class:`CgroupUnavailable` saying why none is writable. Memory and pids
        (v2, else v1) first; where no hierarchy has a pids controller (the GPU host), a memory-only group."""
        name = f"autotune-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        mounts, own = _mounts(), _own_paths()
        errors: list[str] = []
        for want in ({"memory", "pids"}, {"memory"}):
            found = cls._open_v2(mounts, own, name, want, errors) or cls._open_v1(mounts, own, name, want, errors)
            if found is not None:
                version, roots = found
                return cls(version, roots, memory_bytes, pids_max, pids="pids" in want)
        raise CgroupUnavailable("; ".join(dict.fromkeys(errors)) or "no cgroup file system is mounted")

    @staticmethod
    def _open_v2(mounts: list, own: dict, name: str, want: set,
                 errors: list[str]) -> Optional[tuple[str, dict[str, Path]]]:
        for m, fstype, _opts in mounts:
            if fstype != "cgroup2":
                continue
            base = Path(m) / own.get("", "/").lstrip("/")
            enable = " ".join(f"+{c}" for c in sorted(want))
            try:
                ctrls = set((base / "cgroup.controllers").read_text().split())
                if not want <= ctrls:
                    raise CgroupUnavailable(f"the {' and '.join(sorted(want))} controllers are not available in "
                                            f"{base} (cgroup.controllers: {' '.join(sorted(ctrls)) or 'none'})")
                sub = set((base / "cgroup.subtree_control").read_text().split())
                if not want <= sub:
                    _write(base / "cgroup.subtree_control", enable)
                root = base / name
                root.mkdir()
                try:
                    _write(root / "cgroup.subtree_control", enable)
                except OSError:
                    root.rmdir()
                    raise
                return "v2", {"v2": root}
            except (OSError, CgroupUnavailable) as e:
                errors.append(f"cgroup v2 at {base}: {e}")
        return None

    @staticmethod
    def _open_v1(mounts: list, own: dict, name: str, want: set,
                 errors: list[str]) -> Optional[tuple[str, dict[str, Path]]]:
        roots: dict[str, Path] = {}
        for key, ctrl in (("memory", "memory"), ("pids", "pids"), ("cpu", "cpuacct")):
            for m, fstype, opts in mounts:
                if fstype == "cgroup" and ctrl in opts:
                    base = Path(m) / own.get(ctrl, "/").lstrip("/")
                    try:
                        (base / name).mkdir()
                        roots[key] = base / name
                    except OSError as e:
                        errors.append(f"cgroup v1 {ctrl} at {base}: {e.strerror}")
                    break
        if want <= set(roots):
            if "pids" not in want:
                roots.pop("pids", None)
            return "v1", roots
        for d in roots.values():
            try:
                d.rmdir()
            except OSError:
                pass
        return None

    def create(self, memory_bytes: Optional[int] = None, pids_max: Optional[int] = None) -> SandboxCgroup:
        """A sandbox's group, with the session's limits or the ones given (the build sandbox's: sandbox/runner.py)."""
        memory_bytes = memory_bytes or self.memory_bytes
        pids_max = pids_max or self.pids_max
        self._n += 1
        dirs = {}
        try:
            for key, root in self.roots.items():
                d = root / f"sandbox-{self._n}"
                d.mkdir()
                dirs[key] = d
            if self.version == "v2":
                d = dirs["v2"]
                _write(d / "memory.max", str(memory_bytes))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                if self.pids:
                    _write(d / "pids.max", str(pids_max))
            else:
                _write(dirs["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                sw = dirs["memory"] / "memory.memsw.limit_in_bytes"
                if sw.exists():
                    try:
                        _write(sw, str(memory_bytes))
                    except OSError:
                        pass
                if self.pids:
                    _write(dirs["pids"] / "pids.max", str(pids_max))
        except OSError:
            SandboxCgroup(dirs, self.version).remove(0)
            raise
        return SandboxCgroup(dirs, self.version)

    def close(self) -> None:
        """Kill and remove what is left of every sandbox group, then the session's group."""
        first = next(iter(self.roots.values()))
        names = [c.name for c in first.iterdir() if c.is_dir()] if first.exists() else []
        for name in names:
            group = SandboxCgroup({k: r / name for k, r in self.roots.items() if (r / name).exists()}, self.version)
            group.kill()
            group.remove(1.0)
        for root in self.roots.values():
            try:
                root.rmdir()
            except OSError:
                pass

    def describe(self) -> str:
        return f"cgroup {self.version} ({', '.join(str(p) for p in self.roots.values())})"
