"""TLS for the clients: the context a cluster with ``[cluster] tls_*`` expects.

The servers check certificates against the cluster's CA and nothing else (no host name:
members advertise addresses that may change), so the context made here does the same:
the server's certificate must chain to ``ca_file``; ``check_hostname`` is off. A node wants
a client certificate (``cert_file``, ``key_file``); a router does not.
"""

from __future__ import annotations

import os
import ssl
import stat
from typing import Optional


def _check_key_mode(path: str) -> None:
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if st.st_mode & 0o077:
        raise ValueError(f"{path} may be read or written by its group or others "
                         f"(mode {st.st_mode & 0o7777:04o}): chmod 600 it")


def tls_context(ca_file: str, cert_file: Optional[str] = None,
                key_file: Optional[str] = None) -> ssl.SSLContext:
    """A client context: TLS 1.2 or later, the server's certificate checked against the
    CA certificates of ``ca_file`` (PEM), and this client's certificate and key when given
    (the key file held to the token file's rule: mode 0600 or stricter)."""
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file go together")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=ca_file)
    if cert_file is not None and key_file is not None:
        _check_key_mode(key_file)
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def describe(e: BaseException) -> str:
    """An ssl error in words, saying so when the server seems not to speak TLS."""
    text = str(e)
    if any(s in text for s in ("WRONG_VERSION_NUMBER", "wrong version number",
                                "packet length too long", "record layer failure",
                                "PACKET_LENGTH_TOO_LONG")):
        return f"the server does not speak TLS (is TLS off on that port?): {text}"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return f"the server's certificate was refused: {text}"
    if "CERTIFICATE_REQUIRED" in text or "certificate required" in text:
        return f"the server wants a client certificate its CA signed (cert_file, key_file): {text}"
    return text
