"""URL handling: masking secrets, and splitting a URL into its base and its options."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from ._errors import InvalidOptionError

__all__ = [
    "PERCENT_ENCODING_HINT",
    "ServerURL",
    "mask_url",
    "parse_server_url",
    "scrub_secret",
    "split_url",
    "url_password",
]

#: Appended to every URL error a password with reserved characters could cause.
PERCENT_ENCODING_HINT = (
    "a user name or password holding reserved characters (@ : / ? # [ ] %) must be "
    "percent-encoded, e.g. urllib.parse.quote(password, safe='')"
)

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
    """*text* (a driver's error message, say) with the URL's passwords masked out: the
    user info's and those of query parameters named like one (``sentinel_password``)."""
    text = text.replace(url, mask_url(url))
    password = url_password(url)
    # Both forms: the URL holds them percent-encoded, a driver's message decoded.
    secrets = [password, unquote(password)] if password else []
    query = "?" + url.partition("?")[2].partition("#")[0]
    for match in _SECRET_PARAM.finditer(query):
        value = query[match.end(1) : match.end()]
        secrets += [value, unquote(value)]
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return text


def split_url(url: str, keep: frozenset[str] = frozenset()) -> tuple[str, dict[str, str]]:
    """Split *url* into the URL without our options and the options from its query.

    Query parameters named in *keep* belong to the driver (``sslmode``, say) and stay
    in the URL; names are compared ignoring case, as MongoDB does (``replicaset``).
    A parameter given twice is an error rather than a silent pick.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL"
        raise _url_error("host", "a '[' or ']' that does not enclose an IPv6 address") from None
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


@dataclass(frozen=True, slots=True)
class ServerURL:
    """The parts of a ``scheme://[user[:password]@]host[:port][,host...][/path][?query]`` URL.

    ``hosts`` holds ``(host, port)`` pairs (IPv6 without brackets; ``port`` None when
    the URL gives none); ``path`` is percent-decoded and has no leading slash.
    """

    scheme: str
    username: str | None
    password: str | None
    hosts: tuple[tuple[str, int | None], ...]
    path: str
    query: dict[str, str]


def _url_error(part: str, problem: str, hint: bool = True) -> InvalidOptionError:
    # Never the URL itself: when it does not parse, masking cannot find the password.
    message = f"URL {part}: {problem}"
    return InvalidOptionError(f"{message}; {PERCENT_ENCODING_HINT}" if hint else message)


def _host_and_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed:
            raise _url_error("host", "an IPv6 address opened with '[' is never closed")
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise _url_error("host", f"{host!r} is not an IPv6 address", hint=False) from None
        if rest and not rest.startswith(":"):
            raise _url_error("host", "only ':port' may follow a bracketed IPv6 address")
        port_text = rest[1:] if rest else None
    else:
        if text.count(":") > 1:
            raise _url_error("host", "an IPv6 address must be written in brackets, e.g. [::1]")
        host, colon, port_text_or_empty = text.partition(":")
        port_text = port_text_or_empty if colon else None
        if any(char in host for char in "[]"):
            raise _url_error("host", "a '[' or ']' belongs only around an IPv6 address")
    if any(char.isspace() or not char.isprintable() for char in host):
        raise _url_error("host", "holds a space or a control character")
    if port_text is None:
        return host, None
    if not (port_text.isascii() and port_text.isdigit()):
        raise _url_error("port", "is not a number from 1 to 65535")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise _url_error("port", f"{port} is not from 1 to 65535", hint=False)
    return host, port


def parse_server_url(url: str, *, multi_host: bool = False) -> ServerURL:
    """Split a server URL into its parts, or raise `InvalidOptionError` naming the bad one.

    Stricter than `urllib.parse`, which silently reads a password's ``#`` as the start
    of a fragment or its ``/`` as the start of the path: any sign of that is an error
    saying to percent-encode. Messages never contain the URL or the password.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme:
        raise _url_error("scheme", "expected scheme://...", hint=False)
    authority = re.match(r"[^/?#]*", rest).group()  # type: ignore[union-attr]
    tail = rest[len(authority) :]
    if "#" in tail:
        raise _url_error("fragment", "a URL here has no #fragment (a '#' in a password is %23)")
    path, _, query_text = tail.partition("?")
    if "@" in path:
        raise _url_error("path", "holds an '@' (a '/' in a password is %2F)")
    userinfo, at, host_list = authority.rpartition("@")
    if "@" in userinfo:
        raise _url_error("user info", "holds more than one '@' (an '@' in a password is %40)")
    username: str | None = None
    password: str | None = None
    if at:
        user_text, colon, password_text = userinfo.partition(":")
        username = unquote(user_text) if user_text else None
        password = unquote(password_text) if colon else None
    parts = host_list.split(",")
    if len(parts) > 1 and not multi_host:
        raise _url_error("host", "names several hosts; this backend takes one", hint=False)
    hosts = tuple(_host_and_port(part) for part in parts)
    if len(parts) > 1 and any(not host for host, _ in hosts):
        raise _url_error("host", "an empty host in the list of hosts", hint=False)
    query = dict(parse_qsl(query_text, keep_blank_values=True))
    return ServerURL(scheme.lower(), username, password, hosts, unquote(path[1:]), query)
