"""The doctor's report: findings about a deployment's settings, and the checks every backend shares.

`SessionManager.diagnose` runs the common checks here (TLS, the password's source,
client-side encryption) and the backend's own `SessionManager._diagnose` hook, which
reads the server's settings and returns `Finding`s; it may call `clock_skew`,
`schema_version` and `encryption_at_rest` for the checks whose logic is the same on
every engine.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._urls import mask_url, parse_server_url

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = [
    "DOCS_PAGE",
    "REPORT_SCHEMA_VERSION",
    "SEVERITIES",
    "Diagnosis",
    "Finding",
    "Severity",
    "build_report",
    "clock_skew",
    "common_findings",
    "encryption_at_rest",
    "finding",
    "schema_version",
    "worst",
]

#: Bumped whenever the JSON form of `Diagnosis` changes incompatibly.
REPORT_SCHEMA_VERSION: Literal[1] = 1
#: Where each check is explained; a finding links to its section (``#<check id>``).
DOCS_SITE = "https://agentsessions.github.io/agentsessions/"
DOCS_PAGE = f"{DOCS_SITE}doctor/"

#: How much a finding matters, from harmless to worst.
Severity = Literal["ok", "info", "warning", "error", "critical"]
#: From harmless to worst: a report's exit status follows the worst finding.
SEVERITIES: tuple[Severity, ...] = ("ok", "info", "warning", "error", "critical")

#: Skew of the client's clock against the server's, in seconds, past which expiry and
#: ``updated_at`` written by several machines disagree enough to matter.
SKEW_WARNING = 1.0
SKEW_INFO = 0.25


class Finding(BaseModel):
    """One check's verdict: what was found, what it means for sessions, how to fix it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str = Field(description="the check's id, e.g. 'redis.eviction'")
    severity: Severity = Field(description="ok < info < warning < error < critical")
    found: str = Field(description="what the server or the URL showed")
    consequence: str = Field(description="what it means for the sessions stored there")
    fix: str = Field(description="how to fix it ('' when nothing needs fixing)")
    docs: str = Field(description="the docs section explaining the check")


class Diagnosis(BaseModel):
    """Every finding of one ``diagnose()`` run; its JSON form is the doctor's ``--json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = Field(
        default=REPORT_SCHEMA_VERSION, description="version of this report's format"
    )
    url: str = Field(description="the URL diagnosed, password masked")
    backend: str = Field(description="the manager's class")
    checked_at: datetime = Field(description="the client's clock when the run started (UTC)")
    worst: Severity = Field(description="the most severe finding's severity")
    findings: tuple[Finding, ...] = Field(description="every finding, most severe first")

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON Schema of the JSON form (committed as ``docs/doctor.schema.json``)."""
        schema = cls.model_json_schema(mode="serialization")
        schema.pop("title", None)
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"{DOCS_SITE}doctor.schema.json",
            "title": f"agentsessions doctor report, schema version {REPORT_SCHEMA_VERSION}",
            **schema,
        }

    def at_least(self, severity: Severity) -> tuple[Finding, ...]:
        """The findings of *severity* or worse."""
        floor = SEVERITIES.index(severity)
        return tuple(f for f in self.findings if SEVERITIES.index(f.severity) >= floor)


def worst(findings: Iterable[Finding]) -> Severity:
    """The most severe of *findings* ("ok" for none)."""
    return max((f.severity for f in findings), key=SEVERITIES.index, default="ok")


def finding(
    check: str, severity: Severity, found: str, consequence: str = "", fix: str = ""
) -> Finding:
    """A `Finding` linked to its docs section (the check id, dots as dashes)."""
    anchor = check.replace(".", "-").replace("_", "-")
    return Finding(
        check=check,
        severity=severity,
        found=found,
        consequence=consequence,
        fix=fix,
        docs=f"{DOCS_PAGE}#{anchor}",
    )


def build_report(manager: SessionManager, started: datetime, findings: list[Finding]) -> Diagnosis:
    """The report of *findings*, most severe first (stable within one severity)."""
    ordered = sorted(findings, key=lambda f: -SEVERITIES.index(f.severity))
    return Diagnosis(
        url=manager.url,
        backend=type(manager).__name__,
        checked_at=started,
        worst=worst(ordered),
        findings=tuple(ordered),
    )


# -- checks every backend shares -------------------------------------------------------

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
# Query parameters and values by which each driver is told to use TLS.
_TLS_ON = {
    "sslmode": {"require", "verify-ca", "verify-full"},
    "ssl": {"true", "1", "yes", "require", "on"},
    "tls": {"true", "1", "yes", "on"},
}
_TLS_SCHEMES = frozenset({"rediss", "rediss+cluster", "rediss+sentinel", "mongodb+srv"})


def _is_loopback(host: str) -> bool:
    if not host or host.startswith("/") or host.lower() in _LOOPBACK_NAMES:
        return True  # an empty host is a unix socket or the driver's local default
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def common_findings(manager: SessionManager) -> list[Finding]:
    """The checks that read only the URL and the manager: TLS, password, encryption."""
    out: list[Finding] = []
    out.append(_encryption(manager))
    if manager.default_port is None:
        return out  # an embedded engine: no network, no password
    url = manager._url
    try:
        parts = parse_server_url(url, multi_host=True)
    except ValueError:
        return out  # the backend parses its own URL forms; connect() has accepted it
    # libpq takes hosts (and passwords) from the query string too: ?host=a,b&password=...
    extra = [(h, None) for h in parts.query.get("host", "").split(",") if h]
    out.append(_tls(parts.scheme, (*parts.hosts, *extra), parts.query, mask_url(url)))
    in_query = any(k.lower().endswith("password") and v for k, v in parts.query.items())
    out.append(_password(bool(parts.password) or in_query))
    return out


def _tls(
    scheme: str, hosts: tuple[tuple[str, int | None], ...], query: dict[str, str], masked: str
) -> Finding:
    remote = sorted({host for host, _ in hosts if not _is_loopback(host)})
    lowered = {k.lower(): v.lower() for k, v in query.items()}
    on = scheme in _TLS_SCHEMES or any(
        lowered.get(name) in values for name, values in _TLS_ON.items()
    )
    if on:
        return finding("common.tls", "ok", f"TLS is asked for by the URL ({masked})")
    if not remote:
        return finding(
            "common.tls",
            "ok",
            "the server is on loopback: TLS is not needed",
        )
    return finding(
        "common.tls",
        "warning",
        f"{', '.join(remote)} is reached without TLS",
        "session contents (and the password, if any) cross the network in clear text, "
        "readable and alterable by anyone on the path",
        "use the TLS form of the URL: rediss://, ?sslmode=verify-full for PostgreSQL, "
        "?tls=true for MongoDB",
    )


def _password(present: bool) -> Finding:
    if not present:
        return finding(
            "common.password",
            "ok",
            "the URL holds no password (credentials come from the driver's own sources, "
            "or none are needed)",
        )
    return finding(
        "common.password",
        "info",
        "the URL holds a password",
        "a URL typed on a command line ends up in shell history and in process lists",
        "keep the URL in an environment variable or a secret store, or use the driver's "
        "password file (PGPASSFILE for PostgreSQL)",
    )


def _encryption(manager: SessionManager) -> Finding:
    if manager.encryption is not None:
        return finding(
            "common.encryption",
            "ok",
            "event contents, metadata and states are encrypted before they leave the process",
        )
    return finding(
        "common.encryption",
        "info",
        "sessions are stored as plain JSON (no client-side encryption)",
        "whoever can query the database, or reads a dump of it, reads the conversations; "
        "encryption of the server's own files hides them from neither",
        "connect(url, encryption=Keyring(...)) encrypts them at rest (docs/encryption.md)",
    )


def encryption_at_rest(
    check: str, client_side: bool, server_on: bool | None, found: str, fix: str = ""
) -> Finding:
    """The finding on the server's files, from both sides of the encryption.

    *client_side* is the manager's ``encryption`` option; *server_on* what the server
    reports of its own encryption at rest (None: it cannot tell, or refused to say),
    described by *found*; *fix* names the server's setting that turns it on, or (when
    *server_on* is None) how to let the server tell.
    """
    if client_side:
        return finding(
            check,
            "ok",
            "client-side encryption is on: event contents, metadata and states reach the "
            f"server's files encrypted (server: {found})",
        )
    if server_on:
        return finding(check, "ok", found)
    disk = "encrypt the disk under it (LUKS, the cloud provider's volume encryption)"
    if server_on is None:
        return finding(
            check,
            "info",
            found,
            "whether the server's files are encrypted cannot be read from it: on a disk "
            "that is not, a copied disk, snapshot or file-level backup exposes the "
            "conversations",
            (f"{fix}; " if fix else "")
            + f"check that the server's disk is encrypted, or {disk}, or encrypt on the "
            "client: connect(url, encryption=Keyring(...))",
        )
    return finding(
        check,
        "info",
        found,
        "the server's data files, its logs and file-level backups hold the conversations "
        "in clear, unless the disk under them is encrypted: a copied disk, snapshot or "
        "backup exposes them",
        (f"{fix}, or " if fix else "")
        + f"{disk}, or encrypt on the client: connect(url, encryption=Keyring(...))",
    )


def clock_skew(before: datetime, server: datetime, after: datetime) -> Finding:
    """The ``common.clock_skew`` finding of a server clock read between *before* and *after*.

    The server's reading is compared with the midpoint of the client's two readings;
    half the round trip bounds the error of the measurement.
    """
    midpoint = before + (after - before) / 2
    skew = (server - midpoint).total_seconds()
    error = (after - before).total_seconds() / 2
    found = f"the server's clock is {skew:+.3f} s from this client's (±{error:.3f} s)"
    seen = abs(skew) - error  # the least the skew can be
    if seen <= SKEW_INFO:
        return finding("common.clock_skew", "ok", found)
    severity: Severity = "warning" if seen > SKEW_WARNING else "info"
    return finding(
        "common.clock_skew",
        severity,
        found,
        "expiry and updated_at come from the clock of the application server that "
        "writes: servers whose clocks disagree expire sessions early or late and order "
        "them wrongly",
        "run NTP (chrony, systemd-timesyncd) on every application server and on the "
        "database server",
    )


def schema_version(check: str, stored: int | None, known: int) -> Finding:
    """The finding comparing a store's schema version with the one this library writes."""
    if stored is None:
        return finding(
            check,
            "info",
            "no agentsessions schema yet: the first connection creates it",
        )
    if stored == known:
        return finding(check, "ok", f"schema version {stored}, the one this release writes")
    if stored < known:
        return finding(
            check,
            "info",
            f"schema version {stored}; this release writes {known}",
            "the next connection migrates it (logged)",
            "",
        )
    return finding(
        check,
        "error",
        f"schema version {stored} is newer than the {known} this release understands",
        "this release refuses to open it (older code could corrupt it)",
        "upgrade the backend's distribution on every application server",
    )
