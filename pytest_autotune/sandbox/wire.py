"""The wire format between the controller and a sandbox process.

The sandbox runs hostile code, so nothing it sends may execute code in the parent: no pickle. A message is a
JSON header plus raw tensor bytes. Tensors are rebuilt with ``torch.frombuffer`` from a whitelist of dtypes,
after checking that the byte count matches the declared shape. Frame: ``!Q`` header length, header, then the
blobs back to back.
"""

from __future__ import annotations

import json
import math
import select
import socket
import struct
import time
from typing import Any, Callable, Optional

import torch

MAX_HEADER_BYTES = 64 << 20
MAX_MESSAGE_BYTES = 16 << 30

_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}


class WireError(Exception):
    """The peer sent something that is not a valid message (or went away)."""


class PeerGone(WireError):
    """The peer closed the connection (crashed or exited)."""


class WireTimeout(WireError):
    """No complete message arrived in time."""


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise WireError(f"dtype {dtype} cannot cross the sandbox boundary") from None


def encode(obj: Any) -> bytes:
    blobs: list[bytes] = []

    def walk(o: Any) -> Any:
        if isinstance(o, torch.Tensor):
            t = o.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            t = t.contiguous()
            idx = len(blobs)
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            blobs.append(raw)
            return {"__tensor__": idx, "dtype": dtype_name(t.dtype), "shape": list(t.shape), "nbytes": len(raw)}
        if isinstance(o, dict):
            for k in o:
                if not isinstance(k, str):
                    raise WireError(f"message keys must be strings, got {type(k).__name__}")
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [walk(v) for v in o]
        if isinstance(o, float):
            if math.isnan(o) or math.isinf(o):
                return {"__float__": repr(o)}
            return o
        if o is None or isinstance(o, (bool, int, str)):
            return o
        if isinstance(o, bytes):
            return {"__bytes__": o.hex()}
        raise WireError(f"cannot send {type(o).__name__} across the sandbox boundary")

    header = json.dumps(walk(obj), separators=(",", ":")).encode()
    return struct.pack("!QQ", len(header), sum(len(b) for b in blobs)) + header + b"".join(blobs)


def decode(header_bytes: bytes, payload: bytes) -> Any:
    try:
        header = json.loads(header_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"malformed message header: {e}") from None
    offset = 0

    def walk(o: Any) -> Any:
        nonlocal offset
        if isinstance(o, dict):
            if "__tensor__" in o:
                return _rebuild_tensor(o)
            if "__float__" in o:
                v = o["__float__"]
                if v not in ("nan", "inf", "-inf"):
                    raise WireError("bad special float")
                return float(v)
            if "__bytes__" in o:
                return bytes.fromhex(o["__bytes__"])
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o

    def _rebuild_tensor(o: dict) -> torch.Tensor:
        nonlocal offset
        dt = _DTYPES.get(o.get("dtype"))
        shape = o.get("shape")
        nbytes = o.get("nbytes")
        if dt is None or not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise WireError("malformed tensor descriptor")
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dt).element_size()
        if not isinstance(nbytes, int) or nbytes != numel * itemsize or offset + nbytes > len(payload):
            raise WireError("tensor byte count does not match its shape")
        chunk = bytearray(payload[offset : offset + nbytes])
        offset += nbytes
        if numel == 0:
            return torch.empty(shape, dtype=dt)
        return torch.frombuffer(chunk, dtype=dt).reshape(shape)

    return walk(header)


class Channel:
    """A framed, bidirectional message channel over a connected stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(True)

    @classmethod
    def from_fd(cls, fd: int) -> "Channel":
        return cls(socket.socket(fileno=fd))

    def send(self, obj: Any) -> None:
        data = encode(obj)
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise PeerGone("the other side of the sandbox channel is gone") from e

    def recv(self, timeout: Optional[float] = None, watchdog: Optional[Callable[[], None]] = None) -> Any:
        """Receive one message. ``watchdog`` runs about every 50 ms while waiting (it may raise)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        head = self._recv_exact(16, deadline, watchdog)
        hlen, plen = struct.unpack("!QQ", head)
        if hlen > MAX_HEADER_BYTES or plen > MAX_MESSAGE_BYTES:
            raise WireError(f"message too large ({hlen} + {plen} bytes)")
        header = self._recv_exact(hlen, deadline, watchdog)
        payload = self._recv_exact(plen, deadline, watchdog)
        return decode(header, payload)

    def _recv_exact(self, n: int, deadline: Optional[float], watchdog) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            wait = 0.05
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WireTimeout("no answer from the sandbox in time")
                wait = min(wait, left)
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                if watchdog is not None:
                    watchdog()
                continue
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except (ConnectionResetError, OSError) as e:
                raise PeerGone("the sandbox connection broke") from e
            if k == 0:
                raise PeerGone("the sandbox closed the connection")
            got += k
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
