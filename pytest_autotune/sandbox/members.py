"""A sandbox's processes as the host's ``/proc`` shows them, read by the controller (docs/design/threat-model.md, "slow
the baseline from other processes"), cgroup or not.

Under the jail every sandbox is init of a pid namespace of its own (:mod:`.jail`). Every process it ever starts --
forked, double-forked, ``setsid``, a daemon -- lives in that namespace (or one nested in it), and an orphan is
reparented to the namespace's init, the sandbox itself, never to a process outside. So from the host:

* :func:`namespace_members` -- every live process whose ``/proc/PID/ns/pid`` is the sandbox's namespace, or whose
  ancestors lead to one that is (nested namespaces): the definitive count, one pass over ``/proc``;
* :func:`tree` -- the sandbox and its descendants through ``/proc/PID/task/TID/children``: cheap (a few files for
  an honest sandbox), complete in a pid namespace, and what :func:`tasks` counts for the process limit;
* :func:`group_members` -- without a pid namespace (the jail off or partial), its process group and its
  descendants: a ``setsid`` double fork leaves both, which is what the pid namespace is for.

Every function reads the kernel's files only; nothing the sandbox says about itself is used.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, Optional


class ProcInfo(NamedTuple):
    pid: int
    comm: str
    ppid: int
    pgid: int
    sid: int
    state: str


def info(pid: int) -> Optional[ProcInfo]:
    """``/proc/PID/stat`` of a live process (None for a zombie or a process that is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    head, _, rest = stat.rpartition(b")")
    fields = rest.split()
    if len(fields) < 5 or fields[0] in (b"Z", b"X"):
        return None
    comm = head.partition(b"(")[2].decode("utf-8", "replace")
    return ProcInfo(pid, comm, int(fields[1]), int(fields[2]), int(fields[3]), fields[0].decode())


def pid_namespace(pid: int) -> Optional[str]:
    """``pid:[inode]`` of ``pid``'s pid namespace (needs ptrace-read access: the controller is root or owns it)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def ns_pids(pid: int) -> list[int]:
    """``NSpid`` of ``/proc/PID/status``: its pid in every namespace from the reader's down to its own."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def leads_namespace(pid: int) -> bool:
    """Is ``pid`` init (pid 1) of a pid namespace other than the reader's? Only then does its namespace hold
    nothing but its own processes."""
    nspid = ns_pids(pid)
    return len(nspid) > 1 and nspid[-1] == 1 and pid_namespace(pid) not in (None, pid_namespace(os.getpid()))


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def tree(pid: int, limit: int = 100_000) -> list[int]:
    """``pid`` and every descendant (by parent links, read from each thread's ``children`` file)."""
    seen, todo = [pid], [pid]
    known = {pid}
    while todo and len(seen) < limit:
        for c in _children(todo.pop()):
            if c not in known:
                known.add(c)
                seen.append(c)
                todo.append(c)
    return seen


def tasks(pid: int) -> int:
    """Processes and threads of ``pid``'s tree, counted as ``pids.max`` counts them (zombies until reaped)."""
    n = 0
    for p in tree(pid):
        try:
            n += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            n += 1
    return n


def _all_pids() -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []


def namespace_members(pid: int) -> list[int]:
    """Live processes of the pid namespace ``pid`` leads, ``pid`` included, and of namespaces nested in it."""
    ns = pid_namespace(pid)
    if ns is None:
        return []
    members: set[int] = set()
    parents: dict[int, int] = {}
    for p in _all_pids():
        inf = info(p)
        if inf is None:
            continue
        parents[p] = inf.ppid
        if pid_namespace(p) == ns:
            members.add(p)
    for p in list(parents):  # a nested namespace's processes: their ancestors lead back into ours
        chain: list[int] = []
        q = p
        while q in parents and q not in members and len(chain) < 4096:
            chain.append(q)
            q = parents[q]
        if q in members:
            members.update(chain)
    return sorted(members)


def group_members(pid: int) -> list[int]:
    """Without a pid namespace: live processes of ``pid``'s process group, and ``pid``'s descendants."""
    found = set(tree(pid))
    for p in _all_pids():
        inf = info(p)
        if inf is not None and inf.pgid == pid:
            found.add(p)
    return sorted(q for q in found if info(q) is not None)


def members(pid: int, cgroup_procs: Optional[list[int]] = None) -> tuple[list[int], str]:
    """Every live process of the sandbox whose main process is ``pid``, and how they were found: its pid namespace
    where it leads one, else its process group and descendants; a cgroup's members are added where there is one."""
    if not sys.platform.startswith("linux") or pid <= 0:
        return [], "none"
    if leads_namespace(pid):
        found, how = set(namespace_members(pid)), "pid namespace"
    else:
        found, how = set(group_members(pid)), "process group and descendants"
    if cgroup_procs is not None:
        found.update(p for p in cgroup_procs if info(p) is not None)
        how += " + cgroup"
    return sorted(found), how


def describe(pid: int, main: int = 0) -> dict:
    """What the refusal names: pid, name, parent, whether it left the session of the sandbox's main process
    ``main`` (``setsid``), its command line."""
    inf = info(pid)
    d: dict = {"pid": pid}
    if inf is not None:
        d.update({"comm": inf.comm, "ppid": inf.ppid})
        lead = info(main) if main > 0 else None
        if lead is not None:
            d["own_session"] = inf.sid != lead.sid
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            d["cmdline"] = f.read(200).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        pass
    return d


__all__ = ["ProcInfo", "info", "pid_namespace", "ns_pids", "leads_namespace", "tree", "tasks", "namespace_members",
           "group_members", "members", "describe"]
