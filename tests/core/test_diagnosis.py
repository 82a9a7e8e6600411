"""The doctor's report model, its committed JSON schema, and the checks every backend shares."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from agentsessions import SEVERITIES, Diagnosis, Finding, connect
from agentsessions.backend import clock_skew, encryption_at_rest, finding, schema_version

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "doctor.schema.json"
PASSWORD = "hunter2pw"


def _normalised(schema: object) -> object:
    """*schema* with the ``enum`` that older pydantic releases (2.7) write beside a
    single-value ``const`` removed: the same constraint, spelled twice."""
    if isinstance(schema, dict):
        return {
            key: _normalised(value)
            for key, value in schema.items()
            if not (key == "enum" and "const" in schema and value == [schema["const"]])
        }
    if isinstance(schema, list):
        return [_normalised(item) for item in schema]
    return schema


def test_the_committed_schema_is_the_models() -> None:
    # Regenerate with: Diagnosis.json_schema() written to docs/doctor.schema.json.
    committed = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert _normalised(committed) == _normalised(Diagnosis.json_schema())


def test_the_report_validates_against_the_committed_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    report = Diagnosis(
        url="redis://h/0",
        backend="X",
        checked_at=datetime.now(timezone.utc),
        worst="error",
        findings=(finding("redis.persistence", "error", "f", "c", "x"),),
    )
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.validate(json.loads(report.model_dump_json()), schema)
    broken = json.loads(report.model_dump_json())
    broken["findings"][0]["severity"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_severities_are_ordered_and_the_worst_wins() -> None:
    assert SEVERITIES == ("ok", "info", "warning", "error", "critical")
    f = finding("a.b", "warning", "found")
    assert f.docs.endswith("/doctor/#a-b")
    with pytest.raises(ValueError):
        Finding(check="a", severity="fatal", found="", consequence="", fix="", docs="")  # type: ignore[arg-type]


async def test_memory_reports_that_nothing_persists() -> None:
    async with connect("memory://") as manager:
        report = await manager.diagnose()
    by_check = {f.check: f for f in report.findings}
    assert by_check["memory.persistence"].severity == "warning"
    assert by_check["common.encryption"].severity == "info"
    assert report.worst == "warning"
    assert [f.severity for f in report.findings] == sorted(
        (f.severity for f in report.findings), key=SEVERITIES.index, reverse=True
    )
    assert report.at_least("warning") == (by_check["memory.persistence"],)


async def test_encryption_on_is_ok() -> None:
    encryption = pytest.importorskip("agentsessions.encryption")
    keyring = encryption.Keyring({"k1": bytes(range(32))})
    async with connect("memory://", encryption=keyring) as manager:
        report = await manager.diagnose()
    assert {f.check: f.severity for f in report.findings}["common.encryption"] == "ok"


def _common(url: str) -> dict[str, Finding]:
    from agentsessions._diagnosis import common_findings

    return {f.check: f for f in common_findings(connect(url))}


@pytest.mark.parametrize(
    ("url", "severity"),
    [
        ("postgresql://app@db.example.com/agents", "warning"),
        ("postgresql://app@10.0.0.5,10.0.0.6/agents", "warning"),
        ("postgresql://app@db.example.com/agents?sslmode=verify-full", "ok"),
        ("postgresql://app@db.example.com/agents?sslmode=prefer", "warning"),
        ("postgresql://app@127.0.0.1/agents", "ok"),
        ("postgresql://app@[::1]/agents", "ok"),
        ("postgresql://app@localhost/agents", "ok"),
        ("postgresql:///agents?host=db.example.com", "warning"),
        ("postgresql:///agents?host=/var/run/postgresql", "ok"),
    ],
)
def test_tls_off_to_a_remote_host_is_a_warning(url: str, severity: str) -> None:
    pytest.importorskip("agentsessions_postgres")
    assert _common(url)["common.tls"].severity == severity


def test_a_password_in_the_url_is_reported_and_never_shown() -> None:
    pytest.importorskip("agentsessions_postgres")
    found = _common(f"postgresql://app:{PASSWORD}@127.0.0.1/agents")
    assert found["common.password"].severity == "info"
    assert PASSWORD not in json.dumps([f.model_dump() for f in found.values()])
    assert _common("postgresql://app@127.0.0.1/agents")["common.password"].severity == "ok"
    in_query = _common(f"postgresql://app@127.0.0.1/agents?password={PASSWORD}")
    assert in_query["common.password"].severity == "info"


def test_clock_skew_is_judged_beyond_the_measurement_error() -> None:
    # Recorded readings: a real server with a wrong clock cannot be made here.
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rtt = timedelta(milliseconds=2)
    assert clock_skew(t0, t0 + rtt / 2, t0 + rtt).severity == "ok"
    assert clock_skew(t0, t0 + timedelta(seconds=0.6), t0 + rtt).severity == "info"
    assert clock_skew(t0, t0 + timedelta(seconds=5), t0 + rtt).severity == "warning"
    assert clock_skew(t0, t0 - timedelta(seconds=5), t0 + rtt).severity == "warning"
    # A skew within half a slow round trip is not proof of one.
    assert clock_skew(t0, t0 + timedelta(seconds=2), t0 + timedelta(seconds=4)).severity == "ok"


def test_schema_versions() -> None:
    assert schema_version("x.schema_version", 3, 3).severity == "ok"
    assert schema_version("x.schema_version", 2, 3).severity == "info"
    assert schema_version("x.schema_version", 4, 3).severity == "error"
    assert schema_version("x.schema_version", None, 3).severity == "info"


def test_the_blocking_manager_diagnoses_too(tmp_path: Path) -> None:
    from agentsessions.sync import connect as connect_sync

    with connect_sync(f"sqlite:///{tmp_path}/s.db?synchronous=full") as manager:
        report = manager.diagnose()
    checks = {f.check: f.severity for f in report.findings}
    assert checks["sqlite.synchronous"] == "ok"
    assert report.backend == "SQLiteSessionManager"


def test_encryption_at_rest_combines_the_client_and_the_server() -> None:
    def judge(client_side: bool, server_on: bool | None) -> Finding:
        return encryption_at_rest(
            "x.encryption_at_rest", client_side, server_on, "server says", "SET x"
        )

    for server_on in (True, False, None):
        on = judge(True, server_on)
        assert (on.severity, on.fix) == ("ok", "")
        assert on.found.endswith("(server: server says)")
    assert judge(False, True) == finding("x.encryption_at_rest", "ok", "server says")
    off = judge(False, False)
    assert (off.severity, off.found) == ("info", "server says")
    assert off.fix.startswith("SET x, or encrypt the disk")
    assert "in clear" in off.consequence
    unknown = judge(False, None)
    assert unknown.severity == "info"
    assert unknown.fix.startswith("SET x; check that the server's disk is encrypted")
    assert "cannot be read" in unknown.consequence
