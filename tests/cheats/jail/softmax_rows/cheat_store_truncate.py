"""JAIL CHEAT: destroy the results database. Find it the ways an attacker would -- walking up from this file and
from the working directory to ``.autotune/results.db``, and through the file descriptors its ancestors (the
zygote, the controller) hold open -- then truncate it to zero bytes and delete it with sqlite's journal files (the
controller then writes into a file that no longer has a name). Every row of the session would be lost, including
those of items measured before this one. Then compute honestly.
Only its own ancestors' files are ever looked at: this file runs on shared machines with the jail off too.
Caught by: the jail's mount view (the store is absent, the repository read-only) and its pid namespace (no other
process's descriptors in /proc). What happened is printed to the sandbox log (``JAIL-CHEAT`` lines)."""
import os
from pathlib import Path

import torch
from torch import nn


def _ancestors():
    out, pid = [], os.getppid()
    for _ in range(3):
        if pid <= 1:
            break
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _candidates():
    seen = set()
    for start in (Path(__file__).resolve().parent, Path(os.getcwd()).resolve()):
        for d in (start, *start.parents):
            p = d / ".autotune" / "results.db"
            if p not in seen:
                seen.add(p)
                yield p
    for pid in _ancestors():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.endswith(".db"):
                p = Path(target)
                if p not in seen:
                    seen.add(p)
                    yield p


def _attack() -> str:
    found, done = [], []
    for p in _candidates():
        try:
            if not p.is_file():
                continue
        except OSError:
            continue
        found.append(str(p))
        try:
            os.truncate(p, 0)
            done.append(f"truncated {p}")
            for side in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(str(p) + side)
                except FileNotFoundError:
                    pass
        except OSError as e:
            done.append(f"{p}: {type(e).__name__}: {e}")
    if any(d.startswith("truncated") for d in done):
        return "SUCCEEDED: " + "; ".join(done)
    return "blocked: " + ("; ".join(done) if done else "no database found")


print(f"JAIL-CHEAT store_truncate: {_attack()}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
