"""CHEAT: memoise answers keyed on what the derived input sets of one timing round share (problems/derived.py):
each set is the round's draw times positive factors, so the signs of its values, and their order of magnitude, are
the draw's. The first set of a round is computed; every later one gets that answer back (cloned, so no output is
shared). The answers are ~spread off, so a checked timed call refuses it.
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
        k = _key(x)
        hit = _cache.get(k)
        if hit is not None:
            return hit.clone()
        out = torch.softmax(x, dim=-1)
        if len(_cache) < 4096:
            _cache[k] = out
        return out
