"""httpx clients for the harness's own requests to an engine server on 127.0.0.1 (health, metrics, effective
configuration, the load generator).

Every client is made with ``trust_env=False`` (a proxy from the environment must never sit between the harness
and a loopback server) and with one SSL context shared by the process. httpx builds a fresh context for every
client by default, loading the whole CA bundle: ~40 ms of CPU per client on the 2-core development machine, and
the harness makes a few clients per measured window (the load generator's, the metrics sampler's, the scrapes).
(The sampler's client is made on the window's event loop as the window starts, which held its first requests
back by those 40 ms; the window's time runs from its first send, so that was lost time, not a measured one.)
The shared context is httpx's own default (verification on, certifi's bundle),
made once; no request of the harness uses TLS (servers listen on plain http://127.0.0.1).
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def client(**kw: Any) -> httpx.Client:
    return httpx.Client(trust_env=False, verify=_ssl_context(), **kw)


def async_client(**kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(trust_env=False, verify=_ssl_context(), **kw)
