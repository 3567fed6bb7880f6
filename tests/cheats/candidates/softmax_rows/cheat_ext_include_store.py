"""CHEAT (C++, at build time): the compiler reads files too. The extension ``#include``s the results database
(``.autotune/results.db`` beside the candidates folder) into a byte array, so that the built library carries the
store -- earlier runs' rows and whatever else is in it -- into every later sandbox of the item.
Caught by: the jail of the build sandbox, which is the same as every sandbox's: the store's folder is hidden from
its view (sandbox/jail_mounts.py), so the compiler finds no such file and the build fails (gate ``build``).
Without the jail's view the include would find the database (and fail on its bytes, or embed them)."""
import os

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORE = os.path.join(_ROOT, ".autotune", "results.db")
SOURCE = f"""
static const unsigned char store[] = {{
#include "{STORE}"
}};
extern "C" unsigned long store_bytes() {{ return sizeof(store); }}
"""
_path = load_inline("catalog_include_store", cpp_sources=SOURCE, is_python_module=False, no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
