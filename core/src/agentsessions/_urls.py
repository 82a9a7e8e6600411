"""URL handling: masking secrets, and splitting a URL into its base and its options."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit

from ._errors import InvalidOptionError

__all__ = ["mask_url", "scrub_secret", "split_url", "url_password"]

_MASK = "***"
# user:password@ in the authority; the host part may hold several hosts (MongoDB).
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*):(?P<secret>[^/?#]*)@")
# Any query parameter whose name mentions a secret (MongoDB's tlsCertificateKeyFilePassword).
_SECRET_PARAM = re.compile(r"(?i)([?&][^=&#]*(?:password|passwd|pass|secret|token)[^=&#]*=)[^&#]*")


def url_password(url: str) -> str | None:
    """The password in *url*, if any (to scrub it from driver messages)."""
    match = _USERINFO.match(url)
    return match.group("secret") if match and match.group("secret") else None


def mask_url(url: str) -> str:
    """*url* with any password replaced by ``***``; safe to print, log or raise."""
    masked = _USERINFO.sub(lambda m: f"{m.group('head')}:{_MASK}@", url, count=1)
    return _SECRET_PARAM.sub(lambda m: f"{m.group(1)}{_MASK}", masked)


def scrub_secret(text: str, url: str) -> str:
    """*text* (a driver's error message, say) with the URL's password masked out."""
    text = text.replace(url, mask_url(url))
    password = url_password(url)
    if password:
        text = text.replace(password, _MASK)
    return text


def split_url(url: str, keep: frozenset[str] = frozenset()) -> tuple[str, dict[str, str]]:
    """Split *url* into the URL without our options and the options from its query.

    Query parameters named in *keep* belong to the driver (``sslmode``, say) and stay
    in the URL; names are compared ignoring case, as MongoDB does (``replicaset``).
    A parameter given twice is an error rather than a silent pick.
    """
    parts = urlsplit(url)
    keep = frozenset(name.lower() for name in keep)
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() in keep:
            theirs.append((name, value))
            continue
        if name in ours:
            raise InvalidOptionError(f"option {name!r} is given twice in the URL")
        ours[name] = value
    # Cut the query off by hand: urlunsplit would turn "memory://?x=1" into "memory:".
    base = url.split("?", 1)[0]
    return (f"{base}?{urlencode(theirs)}" if theirs else base), ours
