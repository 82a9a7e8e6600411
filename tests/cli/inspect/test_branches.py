"""The inspector over branching (issue 33): its fork and rewind are the manager's, a fork
shows its origin and a session its branches, paged; a backend without branching refuses
to fork and rewinds by a save. Through Starlette's TestClient on memory, SQLite,
PostgreSQL and MySQL (a memory store with the capability off for the refusal)."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from agentsessions import Capabilities, Session, SessionManager, installed_backends
from agentsessions._memory import MemorySessionManager
from agentsessions_cli import _inspect_app
from agentsessions_cli._common import connect
from agentsessions_cli._inspect_app import create_app
from backend_params import with_option
from inspect_store import TOKEN
from starlette.testclient import TestClient


def _store_url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    namespace = f"inspect_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        return f"memory://{namespace}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'branches.db'}"
    found: str = request.getfixturevalue(f"{kind}_url")
    if found.partition("://")[0] not in installed_backends():
        pytest.fail(f"no backend serves {found.partition('://')[0]}://")
    return with_option(found, "namespace", namespace)


class _Writer:
    """A TestClient with writes allowed, run on the portal's loop, with the manager the
    app opened (a memory:// store is per process, a manager per loop)."""

    def __init__(self, client: TestClient, connect_to: Callable[[], SessionManager]) -> None:
        self.client = client
        self._connect = connect_to

    def call(self, fn: Callable[[SessionManager], object]) -> object:
        async def run() -> object:
            async with self._connect() as manager:
                return await fn(manager)  # type: ignore[misc]

        return self.client.portal.call(run)  # type: ignore[union-attr]

    def get(self, session_id: str) -> Session | None:
        found = self.call(lambda m: m.get(session_id))
        assert found is None or isinstance(found, Session)
        return found

    def csrf(self, path: str) -> str:
        page = self.client.get(path)
        assert page.status_code == 200, page.text
        match = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert match is not None
        return match.group(1)


def _open(connect_to: Callable[[], SessionManager]) -> Iterator[_Writer]:
    app = create_app(connect_to, token=TOKEN, allow_writes=True, allowed_hosts={"testserver"})
    with TestClient(app, follow_redirects=False) as client:
        assert client.get(f"/?token={TOKEN}").status_code == 303
        yield _Writer(client, connect_to)


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
        pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
    ]
)
def writer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Writer]:
    url = _store_url(request.param, request, tmp_path)
    yield from _open(lambda: connect(url))


async def _chat(manager: SessionManager, session_id: str = "chat", events: int = 4) -> Session:
    session = await manager.create(session_id, "ada", state={"mood": "curious"})
    for number in range(events):
        session.add_event("user" if number % 2 == 0 else "agent", f"line {number}")
    await manager.save(session)
    return session


def _session_url(session_id: str, **params: object) -> str:
    return "/session?" + urlencode({"id": session_id, **params})


def _fork_form(w: _Writer, source: Session, index: int, new_id: str) -> dict[str, str]:
    event = source.events[index]
    query = urlencode(
        {"action": "fork", "id": source.session_id, "event": event.id, "position": index}
    )
    csrf = w.csrf(f"/session/confirm?{query}")
    return {
        "id": source.session_id,
        "event": event.id,
        "position": str(index),
        "new_id": new_id,
        "csrf": csrf,
    }


def test_fork_is_the_managers_and_records_its_origin(writer: _Writer) -> None:
    source = writer.call(_chat)
    assert isinstance(source, Session)
    response = writer.client.post("/session/fork", data=_fork_form(writer, source, 1, "retry"))
    assert response.status_code == 303
    fork = writer.get("retry")
    assert fork is not None
    assert fork.events == source.events[:2]
    assert fork.state == source.state and fork.user_id == "ada"
    # Only `SessionManager.fork` records the origin: a hand-made copy would not.
    assert fork.forked_from is not None
    assert fork.forked_from.session_id == "chat"
    assert fork.forked_from.version == source.version
    assert fork.forked_from.event_id == source.events[1].id
    assert writer.get("chat") == source  # the source is untouched
    listing = writer.client.get("/").text
    row = listing[listing.index('class="sid" href="/session?id=retry"') :].split("</tr>")[0]
    assert 'fork of <a href="/session?id=chat">chat</a>' in row
    again = writer.client.post("/session/fork", data=_fork_form(writer, source, 0, "retry"))
    assert again.status_code == 400 and "exists already" in again.text
    assert writer.get("retry") == fork


def test_a_fork_links_to_its_source_at_the_cut(writer: _Writer) -> None:
    source = writer.call(lambda m: _chat(m, events=120))  # three pages of 50
    assert isinstance(source, Session)
    cut = source.events[10]
    writer.call(lambda m: m.fork("chat", "early", through_event_id=cut.id))
    page = writer.client.get(_session_url("early")).text
    origin = re.search(r'<dd id="forked-from">(.*?)</dd>', page, re.S)
    assert origin is not None
    assert f"at version {source.version}" in origin.group(1)
    assert "no longer exists" not in origin.group(1) and "is at version" not in origin.group(1)
    link = re.search(r'id="fork-cut" href="([^"]+)"', origin.group(1))
    assert link is not None
    located = writer.client.get(html.unescape(link.group(1)))
    assert located.status_code == 303
    # Event #10 of 120: on the third page (page=2 counts from the newest, 0).
    assert located.headers["location"] == _session_url("chat", page=2) + "#e10"
    shown = writer.client.get(located.headers["location"].partition("#")[0]).text
    assert 'id="e10"' in shown and cut.id in shown

    # The source moved on, then went away: the fork's page says so.
    async def move_on(manager: SessionManager) -> None:
        chat = await manager.get("chat", last_events=1)
        assert chat is not None
        chat.add_event("user", "more")
        await manager.save(chat)

    writer.call(move_on)
    page = writer.client.get(_session_url("early")).text
    assert f"the source is at version {source.version + 1} now" in page
    writer.call(lambda m: m.delete("chat"))
    page = writer.client.get(_session_url("early")).text
    assert "the source no longer exists" in page
    gone = writer.client.get(html.unescape(link.group(1)))
    assert gone.status_code == 404


def test_a_cut_no_longer_in_the_source_is_a_404(writer: _Writer) -> None:
    source = writer.call(_chat)
    assert isinstance(source, Session)
    writer.call(lambda m: m.fork("chat", "late", through_event_id=source.events[3].id))

    async def rewind(manager: SessionManager) -> None:
        chat = await manager.get("chat")
        assert chat is not None
        await manager.rewind(chat, chat.events[1].id)

    writer.call(rewind)
    missing = writer.client.get(_session_url("chat", event=source.events[3].id))
    assert missing.status_code == 404 and "no longer holds event" in missing.text


def test_branches_are_listed_and_paged(writer: _Writer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_inspect_app, "BRANCHES_PER_PAGE", 2)
    source = writer.call(_chat)
    assert isinstance(source, Session)
    made = {f"b{n}" for n in range(5)}

    async def forks(manager: SessionManager) -> None:
        for number, new_id in enumerate(sorted(made)):
            await manager.fork("chat", new_id, through_event_id=source.events[number % 4].id)
        await manager.fork("b0", "b0-deeper")  # a fork of a fork is b0's branch, not chat's

    writer.call(forks)
    seen: list[str] = []
    pages = 0
    next_url: str | None = _session_url("chat")
    for _ in range(10):  # bounded: 5 forks, 2 a page
        if next_url is None:
            break
        page = writer.client.get(next_url).text
        pages += 1
        section = page[page.index('id="branches"') :]
        rows = re.findall(r'class="branch-id" href="[^"]+">([^<]+)</a>', section)
        assert 0 < len(rows) <= 2
        seen += rows
        more = re.search(r'id="more-branches" href="([^"]+)"', section)
        next_url = html.unescape(more.group(1)).partition("#")[0] if more else None
    assert pages == 3
    assert sorted(seen) == sorted(made) and len(seen) == len(set(seen))
    deeper = writer.client.get(_session_url("b0")).text
    assert "b0-deeper" in deeper[deeper.index('id="branches"') :]
    lone = writer.client.get(_session_url("b0-deeper")).text
    assert 'id="no-branches"' in lone


def test_rewind_is_the_managers_and_can_archive(writer: _Writer) -> None:
    source = writer.call(_chat)
    assert isinstance(source, Session)
    cut = source.events[1]
    query = urlencode({"action": "rewind", "id": "chat", "event": cut.id, "position": 1})
    confirm = writer.client.get(f"/session/confirm?{query}").text
    assert 'name="archive"' in confirm
    form = {
        "id": "chat",
        "event": cut.id,
        "position": "1",
        "csrf": writer.csrf(f"/session/confirm?{query}"),
    }
    done = writer.client.post("/session/rewind", data={**form, "archive": "on"})
    assert done.status_code == 303 and "archived" in html.unescape(done.headers["location"])
    after = writer.get("chat")
    assert after is not None
    assert after.events == source.events[:2] and after.version == source.version + 1
    archived = writer.call(lambda m: m.archived_events("chat"))
    assert archived == source.events[2:]


# -- a backend without branching ----------------------------------------------------------


class _NoBranching(MemorySessionManager):
    capabilities = Capabilities(persistent=False, shared=True, compaction=True)


@pytest.fixture
def plain() -> Iterator[_Writer]:
    url = f"memory://inspect_{uuid.uuid4().hex[:12]}"
    yield from _open(lambda: _NoBranching(url))


def test_without_branching_fork_is_refused_and_rewind_saves(plain: _Writer) -> None:
    source = plain.call(_chat)
    assert isinstance(source, Session)
    page = plain.client.get(_session_url("chat")).text
    assert "rewind to here" in page and "fork from here" not in page
    assert 'id="branches"' not in page
    query = urlencode({"action": "fork", "id": "chat", "event": source.events[1].id})
    refused = plain.client.get(f"/session/confirm?{query}")
    assert refused.status_code == 501 and "capabilities.branching" in refused.text
    csrf = plain.csrf("/session/confirm?action=delete&id=chat")
    form = {"id": "chat", "event": source.events[1].id, "position": "1", "csrf": csrf}
    post = plain.client.post("/session/fork", data={**form, "new_id": "copy"})
    assert post.status_code == 501 and "Nothing was written" in post.text
    assert plain.get("copy") is None
    archive = plain.client.post("/session/rewind", data={**form, "archive": "on"})
    assert archive.status_code == 400 and plain.get("chat") == source
    rewound = plain.client.post("/session/rewind", data=form)
    assert rewound.status_code == 303
    after = plain.get("chat")
    assert after is not None
    assert after.events == source.events[:2] and after.version == source.version + 1


def test_finding_a_cut_reads_ever_longer_tails(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tails.db'}"
    asked: list[int | None] = []

    def recording() -> SessionManager:
        manager = connect(url)
        original = manager.get

        async def get(session_id: str, **options: object) -> Session | None:
            asked.append(options.get("last_events"))  # type: ignore[arg-type]
            return await original(session_id, **options)  # type: ignore[arg-type]

        manager.get = get  # type: ignore[method-assign]
        return manager

    for w in _open(recording):
        source = w.call(lambda m: _chat(m, events=300))
        assert isinstance(source, Session)
        asked.clear()
        recent = w.client.get(_session_url("chat", event=source.events[290].id))
        assert recent.headers["location"] == _session_url("chat", page=0) + "#e290"
        assert asked == [50]  # among the newest 50: one small read
        asked.clear()
        old = w.client.get(_session_url("chat", event=source.events[5].id))
        assert old.headers["location"] == _session_url("chat", page=5) + "#e5"
        assert asked == [50, 200, 800]
