"""Secrets out of everything the tool prints or writes: a URL's ``user:password@``, tokens, Authorization values.

Used for every message that names a server (``--engine-url``, ``HF_ENDPOINT``), for the Hub client's errors and log
lines, and for what a Hub server sends back (an error message or a commit URL may repeat the token it was sent).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#@]*@")  # scheme://user:password@host
_AUTHORIZATION = re.compile(r"(?i)(?P<key>\bauthorization[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic)\s+)?[^\s'\",;]+")
_BEARER = re.compile(r"(?i)(?P<key>\bbearer\s+)[^\s'\",;]+")
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")  # the Hub's own token format
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")  # C0/C1 controls, line separators, surrogates


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``, for every message that names it."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{MASK}@" + parts.netloc.rsplit("@", 1)[1]))


def has_userinfo(url: str) -> bool:
    """Whether ``url`` carries a user name or password (``scheme://user:password@host``)."""
    return "@" in urllib.parse.urlsplit(url).netloc


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with each of ``secrets`` (tokens, passwords), every URL's userinfo, every ``Authorization`` header
    value, every ``Bearer`` token and every Hub-format token (``hf_...``) replaced by ``***``."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _AUTHORIZATION.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _BEARER.sub(lambda m: f"{m['key']}{MASK}", text)
    return _HF_TOKEN.sub(MASK, text)


def printable(text: str) -> str:
    """``text`` with every control character, Unicode line separator and lone surrogate written as ``\\xNN`` or
    ``\\uNNNN``: safe for one terminal or log line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)
