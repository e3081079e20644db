"""The TLS verification context every outbound HTTPS request uses (model client, sinks and alerts,
web_fetch, web_search, doctor's probe).

``ca_context`` is built once per process: loading the CA bundle costs tens of milliseconds of CPU,
which would otherwise be paid per request (and serialize parallel fetches); serve's forkserver
builds it before forking workers. Sources: ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, else certifi.
``verify_for`` loads the bundle only for ``https://`` URLs.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl  # imported when a context is built: a listing that sends nothing never loads it


@functools.cache
def ca_context() -> ssl.SSLContext:
    """The verifying context with the CA bundle loaded, once per process."""
    import ssl

    import certifi

    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    return ssl.create_default_context(cafile=cafile or (None if capath else certifi.where()), capath=capath)


@functools.cache
def _no_ca() -> ssl.SSLContext:
    """For ``http://`` URLs: a verifying context with no CA loaded (cheap; never used on plain HTTP,
    and a redirect to https would fail against it rather than go unchecked)."""
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def verify_for(url: str) -> ssl.SSLContext:
    """The context for ``url``: the CA bundle only for ``https://`` (httpx would load its own
    default bundle for ``verify=True`` even for ``http://``)."""
    return ca_context() if url.lower().startswith("https:") else _no_ca()
