"""CHEAT: memoise answers keyed on what the derived input sets of one timing round share (problems/derived.py):
each set is the round's draw times positive factors, so the signs of its values, and their order of magnitude, are
the draw's. The first set of a round is computed; every later one gets that answer back (cloned, so no output is
shared). The answers are ~spread off, so a checked timed call refuses it.
It keeps clear of the probe gate, as an attacker who read gates/probes.py would: inputs with a zero in the head of
the key (the probes' zeros and spikes, whose heads are mostly zeros) are neither memoised nor answered from the
cache. Without that, a spikes probe with no spike among the first 32 values and no positive one among the first 256
got the answer memoised for the zeros probe of the same shape (1/2048 for 1), and the probe gate refused the cheat
before the defence named here ran (a fresh-clone CI run, 2026-12-03; replay: --autotune-probe-seed=675204992724960297).
Expected: refused by the timed-outputs gate (or, were the sets drawn, gains nothing)."""
import torch
from torch import nn

_cache: dict = {}


def _key(x: torch.Tensor) -> tuple:
    flat = x.reshape(-1)
    head = flat[:256]
    return (tuple(x.shape), bytes((head > 0).to(torch.uint8).tolist()),
            tuple(int(v) for v in torch.floor(torch.log2(head.abs() + 1e-30))[:32].tolist()))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x.reshape(-1)[:256] == 0).any()):  # a probe's degenerate input: answer it honestly
            return torch.softmax(x, dim=-1)
        k = _key(x)
        hit = _cache.get(k)
        if hit is not None:
            return hit.clone()
        out = torch.softmax(x, dim=-1)
        if len(_cache) < 4096:
            _cache[k] = out
        return out
