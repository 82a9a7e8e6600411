"""The inspector's handlers through Starlette's TestClient: access, pages, escaping, writes."""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from agentsessions import Session, SessionError, SessionManager, installed_backends, mask_url
from agentsessions_cli import _inspect_app
from agentsessions_cli._common import connect
from agentsessions_cli._inspect_app import SESSIONS_PER_PAGE, create_app
from backend_params import BACKENDS, with_option
from inspect_store import (
    BULK_SESSIONS,
    HOSTILE_AUTHOR,
    HOSTILE_ID,
    HOSTILE_KEY,
    HOSTILE_TEXT,
    LONG_EVENTS,
    TOKEN,
    build_store,
)
from starlette.testclient import TestClient

Factory = Callable[[str], Callable[[], SessionManager]]


def _client(url: str, *, allow_writes: bool = False) -> TestClient:
    app = create_app(
        lambda: connect(url),
        token=TOKEN,
        allow_writes=allow_writes,
        allowed_hosts={"testserver"},
    )
    return TestClient(app, follow_redirects=False)


@pytest.fixture
def client(store_url: str) -> Iterator[TestClient]:
    with _client(store_url) as c:
        assert c.get(f"/?token={TOKEN}").status_code == 303  # sets the cookie
        yield c


def _session_url(session_id: str, **params: object) -> str:
    return "/session?" + urlencode({"id": session_id, **params})


def _positions(page: str) -> list[int]:
    return [int(p) for p in re.findall(r'class="item [^"]*" data-position="(\d+)"', page)]


def _get(url: str, session_id: str) -> Session | None:
    async def read() -> Session | None:
        async with connect(url) as manager:
            return await manager.get(session_id)

    return asyncio.run(read())


# -- access -----------------------------------------------------------------------------


def test_every_page_needs_the_token(store_url: str) -> None:
    with _client(store_url) as c:
        for path in ("/", _session_url("demo"), "/session/export?id=demo", "/inspect.css"):
            response = c.get(path)
            assert response.status_code == 401, path
            assert "demo" not in response.text.replace("/session?id=demo", "")
            assert "Ada" not in response.text
            assert "sessions.db" not in response.text  # not even which store
        assert c.get("/?token=wrong-token").status_code == 401
        assert c.get(_session_url("demo", token="wrong")).status_code == 401


def test_the_token_becomes_a_cookie_and_leaves_the_address(store_url: str) -> None:
    with _client(store_url) as c:
        response = c.get(f"/session?id=demo&token={TOKEN}")
        assert response.status_code == 303
        assert response.headers["location"] == "/session?id=demo"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
        page = c.get("/session?id=demo")
        assert page.status_code == 200
        assert "green tea" in page.text


def test_an_unknown_host_is_refused_even_with_the_token(client: TestClient) -> None:
    # DNS rebinding: another site's name resolved to 127.0.0.1 sends that name as Host.
    response = client.get("/", headers={"host": "attacker.example"})
    assert response.status_code == 421
    assert "demo" not in response.text
    assert "sessions.db" not in response.text


def test_security_headers_forbid_scripts_and_referrers(client: TestClient) -> None:
    response = client.get("/")
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src" not in csp  # falls back to 'none': no script runs at all
    assert response.headers["referrer-policy"] == "same-origin"
    assert "<script" not in response.text


# -- listing ----------------------------------------------------------------------------


def _listed(page: str) -> list[str]:
    return [html.unescape(s) for s in re.findall(r'class="sid" href="[^"]*">([^<]*)</a>', page)]


def test_sessions_are_listed_newest_first_and_paged(client: TestClient) -> None:
    first = client.get("/").text
    ids = _listed(first)
    assert len(ids) == SESSIONS_PER_PAGE
    assert ids[0] == "compacted"  # the last one written
    match = re.search(r'id="next-page" href="([^"]+)"', first)
    assert match is not None
    rest: list[str] = []
    next_url: str | None = html.unescape(match.group(1))
    for _ in range(10):  # bounded: the store holds three pages at most
        if next_url is None:
            break
        page = client.get(next_url).text
        rest += _listed(page)
        found = re.search(r'id="next-page" href="([^"]+)"', page)
        next_url = html.unescape(found.group(1)) if found else None
    assert next_url is None
    everything = ids + rest
    assert len(everything) == len(set(everything)) == BULK_SESSIONS + 5
    assert {"demo", "waiting", "long", HOSTILE_ID, "compacted"} <= set(everything)


def test_filter_by_user_and_search_by_id_prefix(client: TestClient) -> None:
    assert _listed(client.get("/?user=ada").text) == ["compacted", "demo"]
    found = _listed(client.get("/?prefix=bulk-1").text)
    assert found == [f"bulk-{n}" for n in range(19, 9, -1)]
    assert _listed(client.get("/?prefix=nothing-like-this").text) == []
    assert _listed(client.get("/?user=bulk&prefix=bulk-0").text) == [
        f"bulk-{n:02d}" for n in range(9, -1, -1)
    ]


# -- one session ------------------------------------------------------------------------


def test_the_demo_timeline_is_in_order_with_the_call_paired(client: TestClient) -> None:
    page = client.get(_session_url("demo")).text
    stored = _get_demo(client)
    positions = _positions(page)
    assert positions == sorted(positions)
    assert positions[0] == 0
    # The tool call gathers its approval request, approval and result by call_id.
    call = re.search(
        r'<li class="item call done"[^>]*data-call-id="([^"]+)"(.*?)</li>\n</ol>', page, re.S
    )
    assert call is not None
    body = call.group(2)
    for kind in ("tool_call", "approval_requested", "approval", "tool_result"):
        assert f"kind-{kind}" in body
    call_ids = {e.metadata.get("call_id") for e in stored.events if e.metadata.get("call_id")}
    assert call_ids == {call.group(1)}
    assert "I like green tea" in page
    assert "Done: I sent a note to Bob" in page
    assert 'id="pending"' not in page  # approved: nothing waits


def _get_demo(client: TestClient) -> Session:
    exported = client.get("/session/export?id=demo")
    assert exported.status_code == 200
    return Session.model_validate_json(exported.text)


def test_a_pending_approval_is_highlighted(client: TestClient) -> None:
    page = client.get(_session_url("waiting")).text
    assert 'id="pending"' in page
    pending = page[page.index('id="pending"') :]
    assert "send_note" in pending[:2000]
    assert "Alan" in pending[:2000]
    assert re.search(r'<li class="item call pending"', page)
    assert "waiting for approval" in page


def test_metadata_of_a_session(client: TestClient, store_url: str) -> None:
    page = client.get(_session_url("demo")).text
    stored = _get(store_url, "demo")
    assert stored is not None
    facts = page[page.index('id="facts"') : page.index("</dl>")]
    assert f"<dd>{stored.version}</dd>" in facts
    assert f'<dd id="event-count">{len(stored.events)}</dd>' in facts
    assert stored.created_at.strftime("%Y-%m-%d %H:%M:%S") in facts
    assert "never expires" in facts  # the store has no ttl


def test_ttl_left_is_shown(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ttl.db'}?ttl=3600"

    async def fill() -> None:
        async with connect(url) as manager:
            await manager.create("short-lived")

    asyncio.run(fill())
    with _client(url) as c:
        page = c.get(_session_url("short-lived", token=TOKEN), follow_redirects=True).text
    match = re.search(r"<dt>expires in</dt><dd>(\d+)m (\d+)s</dd>", page)
    assert match is not None, page
    left = int(match.group(1)) * 60 + int(match.group(2))
    assert 3500 < left <= 3600


def test_a_long_history_is_paged_never_loaded_whole(client: TestClient) -> None:
    pages = [_positions(client.get(_session_url("long", page=n)).text) for n in range(3)]
    assert pages[0] == list(range(LONG_EVENTS - 50, LONG_EVENTS))
    assert pages[1] == list(range(LONG_EVENTS - 100, LONG_EVENTS - 50))
    assert pages[2] == list(range(0, LONG_EVENTS - 100))
    first = client.get(_session_url("long")).text
    assert 'id="older"' in first
    assert 'id="newer"' not in first
    assert 'id="older"' not in client.get(_session_url("long", page=2)).text
    assert client.get(_session_url("long", page=3)).status_code == 404
    for bad in ("-1", "x", "99999999999"):
        assert client.get(_session_url("long", page=bad)).status_code == 400


def test_a_missing_session_is_a_404(client: TestClient) -> None:
    response = client.get(_session_url("no-such-session"))
    assert response.status_code == 404
    assert "does not exist" in response.text
    assert client.get("/session").status_code == 400


def test_state_is_a_collapsible_tree(client: TestClient) -> None:
    page = client.get(_session_url("waiting")).text
    state = page[page.index('id="state"') :]
    assert "<details" in state
    assert "agentsessions:pending_tool_calls" in state


def test_compaction_summary_links_to_the_archive(client: TestClient) -> None:
    page = client.get(_session_url("compacted")).text
    assert '<li class="item summary"' in page
    assert "Ada said six old things." in page
    assert "old 5" in page
    assert "old 0" not in page
    archive = client.get("/session/archive?id=compacted")
    assert archive.status_code == 200
    for number in range(5):
        assert f"old {number}" in archive.text
    assert "old 5" not in archive.text


def test_export_is_the_line_the_export_verb_writes(client: TestClient, store_url: str) -> None:
    response = client.get("/session/export?id=demo")
    assert response.headers["content-type"].startswith("application/x-ndjson")
    assert 'filename="demo.jsonl"' in response.headers["content-disposition"]
    stored = _get(store_url, "demo")
    assert stored is not None
    assert response.text == stored.model_dump_json() + "\n"
    hostile = client.get("/session/export?" + urlencode({"id": HOSTILE_ID}))
    assert '"' not in hostile.headers["content-disposition"].split("filename=")[1].strip('"')


# -- hostile content --------------------------------------------------------------------


def test_hostile_content_is_escaped_everywhere(client: TestClient) -> None:
    pages = [
        client.get("/").text,
        client.get("/?" + urlencode({"prefix": "<i>"})).text,
        client.get("/?" + urlencode({"user": "<u>mallory</u>"})).text,
        client.get(_session_url(HOSTILE_ID)).text,
        client.get("/?" + urlencode({"prefix": HOSTILE_TEXT})).text,
    ]
    for page in pages:
        assert "<script" not in page
        assert "<img" not in page
        assert "<b " not in page and "<i>" not in page and "<u>" not in page
        assert "onerror=" not in page.replace("onerror=&#34;", "").replace("onerror=&quot;", "")
    session_page = pages[3]
    assert html.escape(HOSTILE_TEXT, quote=False) in session_page.replace("&#34;", '"')
    assert html.escape(HOSTILE_AUTHOR, quote=False) in session_page
    assert html.escape(HOSTILE_ID, quote=False) in session_page.replace("&#34;", '"')
    # The state key is shown as a key, as text.
    assert html.escape(HOSTILE_KEY, quote=False).replace('"', "&#34;") in session_page
    # A search echoes the prefix into an attribute: quoted and escaped.
    assert 'value="&lt;script&gt;' in pages[4]


def test_the_store_url_never_shows_a_password(postgres_url: str) -> None:
    scheme, _, rest = postgres_url.partition("://")
    credentials, _, host = rest.rpartition("@")
    user = credentials.partition(":")[0] or "postgres"
    secret = "hunter2-" + uuid.uuid4().hex
    url = f"{scheme}://{user}:{secret}@{host or rest}"
    url = with_option(url, "namespace", "inspect_" + uuid.uuid4().hex[:8])
    refused: str | None = None
    try:
        with _client(url) as c:
            pages = [
                c.get(f"/?token={TOKEN}", follow_redirects=True),
                c.get(_session_url("absent")),
                c.get("/nowhere"),
            ]
    except SessionError as exc:  # a server that checks passwords refuses the made-up one
        refused = str(exc)
    if refused is not None:
        assert secret not in refused
        pytest.skip("the PostgreSQL server checks passwords and refused the made-up one")
    for response in pages:
        assert secret not in response.text
    shown = re.search(r'id="store">([^<]*)<', pages[0].text)
    assert shown is not None
    assert html.unescape(shown.group(1)) == mask_url(url).partition("?")[0]
    assert user in shown.group(1)  # the rest of the URL is there, only the password masked


# -- writes -----------------------------------------------------------------------------


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match is not None
    return match.group(1)


def test_writes_are_refused_without_the_flag(client: TestClient, store_url: str) -> None:
    page = client.get(_session_url("demo")).text
    assert "rewind to here" not in page and 'id="delete"' not in page
    assert client.get("/session/confirm?action=delete&id=demo").status_code == 403
    stored = _get(store_url, "demo")
    assert stored is not None
    for path, form in (
        ("/session/delete", {"id": "demo"}),
        ("/session/rewind", {"id": "demo", "event": stored.events[0].id, "position": "0"}),
        ("/session/fork", {"id": "demo", "event": stored.events[0].id, "new_id": "f"}),
    ):
        response = client.post(path, data=form)
        assert response.status_code == 403, path
        assert "read-only" in response.text
    assert _get(store_url, "demo") == stored
    assert _get(store_url, "f") is None


@pytest.fixture
def writer(writable_url: str) -> Iterator[TestClient]:
    with _client(writable_url, allow_writes=True) as c:
        c.get(f"/?token={TOKEN}")
        yield c


def test_a_write_needs_the_csrf_token_and_the_same_origin(
    writer: TestClient, writable_url: str
) -> None:
    confirm = writer.get("/session/confirm?action=delete&id=demo")
    assert confirm.status_code == 200
    csrf = _csrf(confirm.text)
    assert writer.post("/session/delete", data={"id": "demo"}).status_code == 403
    assert writer.post("/session/delete", data={"id": "demo", "csrf": "x" * 64}).status_code == 403
    null = writer.post(
        "/session/delete", data={"id": "demo", "csrf": csrf}, headers={"origin": "null"}
    )
    assert null.status_code == 403
    foreign = writer.post(
        "/session/delete",
        data={"id": "demo", "csrf": csrf},
        headers={"origin": "http://attacker.example"},
    )
    assert foreign.status_code == 403
    cross = writer.post(
        "/session/delete",
        data={"id": "demo", "csrf": csrf},
        headers={"sec-fetch-site": "cross-site"},
    )
    assert cross.status_code == 403
    assert _get(writable_url, "demo") is not None
    done = writer.post(
        "/session/delete",
        data={"id": "demo", "csrf": csrf},
        headers={"origin": "http://testserver"},
    )
    assert done.status_code == 303
    assert _get(writable_url, "demo") is None


def test_rewind_keeps_the_events_through_the_one_chosen(
    writer: TestClient, writable_url: str
) -> None:
    before = _get(writable_url, "long")
    assert before is not None
    cut = before.events[99]
    confirm = writer.get(f"/session/confirm?action=rewind&id=long&event={cut.id}&position=99")
    response = writer.post(
        "/session/rewind",
        data={"id": "long", "event": cut.id, "position": "99", "csrf": _csrf(confirm.text)},
    )
    assert response.status_code == 303
    after = _get(writable_url, "long")
    assert after is not None
    assert after.events == before.events[:100]
    assert after.version == before.version + 1
    # The page shown is stale now: the same form again finds no event at that position.
    stale = writer.post(
        "/session/rewind",
        data={
            "id": "long",
            "event": before.events[100].id,
            "position": "100",
            "csrf": _csrf(confirm.text),
        },
    )
    assert stale.status_code == 400
    assert _get(writable_url, "long") == after


def test_fork_copies_the_prefix_and_state_and_never_overwrites(
    writer: TestClient, writable_url: str
) -> None:
    source = _get(writable_url, "waiting")
    assert source is not None
    cut = source.events[1]
    csrf = _csrf(
        writer.get(f"/session/confirm?action=fork&id=waiting&event={cut.id}&position=1").text
    )
    form = {"id": "waiting", "event": cut.id, "position": "1", "new_id": "waiting-b", "csrf": csrf}
    assert writer.post("/session/fork", data=form).status_code == 303
    fork = _get(writable_url, "waiting-b")
    assert fork is not None
    assert fork.events == source.events[:2]
    assert fork.state == source.state
    assert fork.user_id == source.user_id
    assert _get(writable_url, "waiting") == source  # the source is untouched
    again = writer.post("/session/fork", data={**form, "new_id": "demo"})
    assert again.status_code == 400
    assert "exists already" in again.text
    demo = _get(writable_url, "demo")
    assert demo is not None and demo.events[0].content == "Hi, I'm Ada"


# -- every backend ----------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    kind = request.param
    namespace = f"inspect_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        return f"memory://{namespace}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'any.db'}"
    found: str = request.getfixturevalue(f"{kind}_url")
    if found.partition("://")[0] not in installed_backends():
        pytest.fail(f"no backend serves {found.partition('://')[0]}://")
    return with_option(found, "namespace", namespace)


def test_the_pages_work_on_every_backend(any_url: str) -> None:
    with _client(any_url) as c:
        # Built on the client's loop: a memory:// store lives in the process, a manager per loop.
        c.portal.call(build_store, any_url)  # type: ignore[union-attr]
        c.get(f"/?token={TOKEN}")
        listed = _listed(c.get("/").text)
        assert listed[0] == "compacted"
        assert set(_listed(c.get("/?user=ada").text)) == {"demo", "compacted"}
        demo = c.get(_session_url("demo")).text
        assert "green tea" in demo and "kind-tool_result" in demo
        assert 'id="pending"' in c.get(_session_url("waiting")).text
        hostile = c.get(_session_url(HOSTILE_ID)).text
        assert "<script" not in hostile
        assert _positions(c.get(_session_url("long", page=2)).text) == list(range(30))
        assert "old 0" in c.get("/session/archive?id=compacted").text


# -- what the docs promise besides ----------------------------------------------------------


def test_a_search_stops_after_its_scan_and_offers_to_go_on(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Scaled down: at most 10 summaries read per page of results, 5 a listing page.
    monkeypatch.setattr(_inspect_app, "_SEARCH_SCAN", 10)
    monkeypatch.setattr(_inspect_app, "_LIST_BATCH", 5)
    with _client(store_url) as c:
        c.get(f"/?token={TOKEN}")
        found: list[str] = []
        pages = 0
        next_url: str | None = "/?" + urlencode({"prefix": "bulk-0"})
        for _ in range(20):  # bounded: 35 sessions, 10 read per request
            if next_url is None:
                break
            page = c.get(next_url).text
            pages += 1
            assert re.search(r"Searched (\d+) sessions", page).group(1) in ("5", "10")  # type: ignore[union-attr]
            found += _listed(page)
            match = re.search(r'id="next-page" href="([^"]+)"', page)
            next_url = html.unescape(match.group(1)) if match else None
    assert next_url is None
    assert pages >= 3
    assert found == [f"bulk-{n:02d}" for n in range(9, -1, -1)]


def test_pages_read_only_the_tail_they_show(store_url: str, writable_url: str) -> None:
    asked: list[int | None] = []

    def recording(url: str) -> Callable[[], SessionManager]:
        def make() -> SessionManager:
            manager = connect(url)
            original = manager.get

            async def get(session_id: str, **options: object) -> Session | None:
                asked.append(options.get("last_events"))  # type: ignore[arg-type]
                return await original(session_id, **options)  # type: ignore[arg-type]

            manager.get = get  # type: ignore[method-assign]
            return manager

        return make

    app = create_app(recording(store_url), token=TOKEN, allowed_hosts={"testserver"})
    with TestClient(app) as c:
        c.get(f"/?token={TOKEN}")
        c.get(_session_url("long"))
        c.get(_session_url("long", page=1))
    assert asked == [50, 100]
    asked.clear()
    before = _get(writable_url, "long")
    assert before is not None
    app = create_app(
        recording(writable_url), token=TOKEN, allow_writes=True, allowed_hosts={"testserver"}
    )
    with TestClient(app, follow_redirects=False) as c:
        c.get(f"/?token={TOKEN}")
        csrf = _csrf(c.get("/session/confirm?action=delete&id=long").text)
        form = {"id": "long", "event": before.events[120].id, "position": "120", "csrf": csrf}
        assert c.post("/session/rewind", data=form).status_code == 303
    assert asked == [1, LONG_EVENTS - 120]  # the count, then the tail from the event on
    after = _get(writable_url, "long")
    assert after is not None and after.events == before.events[:121]


def test_an_encrypted_store_needs_its_keyring(tmp_path: Path) -> None:
    from agentsessions.encryption import Keyring

    keyring = Keyring({"k1": bytes(range(32))})
    url = f"sqlite:///{tmp_path / 'sealed.db'}"

    async def fill() -> None:
        async with connect(url, keyring=keyring) as manager:
            session = await manager.create("sealed", "ada", state={"secret": "the plan"})
            session.add_event("user", "the secret plan")
            await manager.save(session)

    asyncio.run(fill())
    with _client(url) as c:
        c.get(f"/?token={TOKEN}")
        assert _listed(c.get("/").text) == ["sealed"]  # summaries are not encrypted
        page = c.get(_session_url("sealed"))
        assert page.status_code == 409
        assert "encrypted" in page.text and "AGENTSESSIONS_ENCRYPTION_KEYS" in page.text
        assert "the secret plan" not in page.text
    app = create_app(
        lambda: connect(url, keyring=keyring),
        token=TOKEN,
        allowed_hosts={"testserver"},
        keyring_given=True,
    )
    with TestClient(app) as c:
        c.get(f"/?token={TOKEN}")
        page = c.get(_session_url("sealed"))
        assert page.status_code == 200
        assert "the secret plan" in page.text and "the plan" in page.text


def test_with_writes_every_item_offers_rewind_and_fork(
    writer: TestClient, writable_url: str
) -> None:
    page = writer.get(_session_url("demo")).text
    stored = _get(writable_url, "demo")
    assert stored is not None
    timeline = page[page.index('<ol class="timeline">') : page.index("<h2>State</h2>")]
    items = timeline.split('<li class="item ')[1:]  # each top-level item, up to the next
    assert len(items) == len(_positions(page)) > 0
    for body in items:
        assert "rewind to here" in body and "fork from here" in body
    call = next(body for body in items if "kind-tool_result" in body)
    result = next(i for i, e in enumerate(stored.events) if e.metadata.get("kind") == "tool_result")
    links = re.findall(r"action=rewind&amp;id=demo&amp;event=([^&]+)&amp;position=(\d+)", call)
    assert links == [(stored.events[result].id, str(result))]  # the card's last event
