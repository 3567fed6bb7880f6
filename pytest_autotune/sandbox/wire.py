"""The wire format between the controller and a sandbox process.

The sandbox runs hostile code, so nothing it sends may execute code in the parent: no pickle. A message is a
JSON header plus raw tensor bytes. Tensors are rebuilt with ``torch.frombuffer`` from a whitelist of dtypes,
after checking that the byte count matches the declared shape. Frame: ``!QQ`` header and payload lengths, the
header, then the blobs back to back.

Large outputs do not travel as bytes: a device exports them as a handle (a sealed memfd on the CPU, a CUDA IPC
handle on a GPU; docs/architecture.md#outputs-cross-by-handle). A file descriptor travels as
:class:`PassedFd` (``{"__fd__": i}`` in the header, the descriptor itself as ``SCM_RIGHTS`` ancillary data on the
frame's first bytes). Every channel counts the bytes and descriptors it moved (:attr:`Channel.stats`), so a test
can hold the controller-sandbox traffic of an item to a budget.
"""

from __future__ import annotations

import array
import json
import math
import os
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

MAX_HEADER_BYTES = 64 << 20
MAX_MESSAGE_BYTES = 16 << 30
#: descriptors one message may carry; more are closed unread and the message is refused
MAX_FDS = 64

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


class PassedFd:
    """A file descriptor that travels inside a message. The receiver owns it: :meth:`take` hands the descriptor
    over (the caller closes it), :meth:`close` closes it if nobody took it. Senders keep their own copy and close
    it after sending."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd: Optional[int] = fd

    def take(self) -> int:
        if self.fd is None:
            raise WireError("a passed file descriptor was used twice")
        fd, self.fd = self.fd, None
        return fd

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None

    def __repr__(self) -> str:
        return f"PassedFd({self.fd})"


def close_passed_fds(obj: Any) -> None:
    """Close every :class:`PassedFd` left in a decoded message (error paths, unread outputs)."""
    if isinstance(obj, PassedFd):
        obj.close()
    elif isinstance(obj, dict):
        for v in obj.values():
            close_passed_fds(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            close_passed_fds(v)


@dataclass
class WireStats:
    """What one channel moved, both directions (headers, tensor bytes and descriptors)."""

    messages_sent: int = 0
    messages_received: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    fds_sent: int = 0
    fds_received: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        raise WireError(f"dtype {dtype} cannot cross the sandbox boundary") from None


def dtype_from_name(name: Any) -> torch.dtype:
    dt = _DTYPES.get(name) if isinstance(name, str) else None
    if dt is None:
        raise WireError(f"unknown dtype {name!r}")
    return dt


def encode(obj: Any, fds: Optional[list[int]] = None) -> bytes:
    """Frame ``obj``. :class:`PassedFd` values are replaced by their index in ``fds`` (which must then be given)."""
    blobs: list[bytes] = []

    def walk(o: Any) -> Any:
        if isinstance(o, PassedFd):
            if fds is None or o.fd is None:
                raise WireError("a file descriptor can only travel through Channel.send")
            fds.append(o.fd)
            return {"__fd__": len(fds) - 1}
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


def decode(header_bytes: bytes, payload: bytes, fds: Optional[list[int]] = None) -> Any:
    """Rebuild a message. ``fds`` are the descriptors that came with it; each may be claimed once, and the ones
    the header does not name are closed."""
    fds = list(fds or [])
    claimed: set[int] = set()
    try:
        header = json.loads(header_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        _close_all(fds)
        raise WireError(f"malformed message header: {e}") from None
    offset = 0

    def walk(o: Any) -> Any:
        nonlocal offset
        if isinstance(o, dict):
            if "__fd__" in o:
                i = o["__fd__"]
                if type(i) is not int or not 0 <= i < len(fds) or i in claimed:
                    raise WireError("a message names a file descriptor it did not carry")
                claimed.add(i)
                return PassedFd(fds[i])
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
        name = o.get("dtype")
        dt = _DTYPES.get(name) if isinstance(name, str) else None
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

    try:
        out = walk(header)
    except WireError:
        _close_all(fds)
        raise
    _close_all([fd for i, fd in enumerate(fds) if i not in claimed])
    return out


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class Channel:
    """A framed, bidirectional message channel over a connected ``AF_UNIX`` stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(True)
        self.stats = WireStats()
        self._fds_in: list[int] = []

    @classmethod
    def from_fd(cls, fd: int) -> "Channel":
        return cls(socket.socket(fileno=fd))

    def send(self, obj: Any) -> None:
        fds: list[int] = []
        data = encode(obj, fds)
        try:
            if fds:
                # the descriptors ride on the frame's first bytes; the rest follows as a plain stream
                sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                if sent < len(data):
                    self.sock.sendall(memoryview(data)[sent:])
            else:
                self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise PeerGone("the other side of the sandbox channel is gone") from e
        self.stats.messages_sent += 1
        self.stats.bytes_sent += len(data)
        self.stats.fds_sent += len(fds)

    def recv(self, timeout: Optional[float] = None, watchdog: Optional[Callable[[], None]] = None) -> Any:
        """Receive one message. ``watchdog`` runs about every 50 ms while waiting (it may raise)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._fds_in = []
        try:
            head = self._recv_exact(16, deadline, watchdog)
            hlen, plen = struct.unpack("!QQ", head)
            if hlen > MAX_HEADER_BYTES or plen > MAX_MESSAGE_BYTES:
                raise WireError(f"message too large ({hlen} + {plen} bytes)")
            header = self._recv_exact(hlen, deadline, watchdog)
            payload = self._recv_exact(plen, deadline, watchdog)
        except BaseException:
            _close_all(self._fds_in)
            self._fds_in = []
            raise
        fds, self._fds_in = self._fds_in, []
        self.stats.messages_received += 1
        self.stats.bytes_received += 16 + hlen + plen
        self.stats.fds_received += len(fds)
        if len(fds) > MAX_FDS:
            _close_all(fds)
            raise WireError(f"a message carried {len(fds)} file descriptors (at most {MAX_FDS})")
        return decode(header, payload, fds)

    def _recv_exact(self, n: int, deadline: Optional[float], watchdog) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        anc_space = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
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
                k, ancdata, _flags, _addr = self.sock.recvmsg_into([view[got:]], anc_space)
            except (ConnectionResetError, OSError) as e:
                raise PeerGone("the sandbox connection broke") from e
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
                    self._fds_in.extend(fds)
            if k == 0:
                raise PeerGone("the sandbox closed the connection")
            got += k
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
