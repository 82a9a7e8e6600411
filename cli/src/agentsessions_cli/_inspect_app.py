"""The ``agentsessions inspect`` web app: server-rendered pages over any store, read-only unless
writes are allowed, behind a random access token.

Every page works without JavaScript (none is served). Every value is escaped by Jinja2's
autoescaping, and the Content-Security-Policy forbids scripts outright, so hostile event
content stays text even if a template slipped. Writes (delete, rewind, fork) exist only
with ``allow_writes``, each behind a confirmation page whose form carries a CSRF token.
Rewind and fork are the manager's own `rewind` and `fork` where the backend declares
``capabilities.branching``; without it a rewind is a version-checked save of the shortened
tail and a fork is refused (a copy would not record where it came from).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.resources
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qs, urlencode

import jinja2
from agentsessions import (
    BackendUnavailableError,
    InvalidInputError,
    SessionDecryptionError,
    SessionError,
    SessionExistsError,
    SessionManager,
    SessionNotFoundError,
    SessionSummary,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ._common import KEYS_VARIABLE
from ._inspect_views import (
    EVENTS_PER_PAGE,
    MAX_PAGE,
    event_page,
    json_size,
    last_events_for,
    pending_calls,
    timeline,
    ttl_left,
)

__all__ = ["BRANCHES_PER_PAGE", "SESSIONS_PER_PAGE", "create_app"]

#: Sessions on one page of the listing.
SESSIONS_PER_PAGE = 25
#: Forks of a session listed on one page of its "Branches" section.
BRANCHES_PER_PAGE = 20
# Finding a fork's cut in its source reads ever longer tails (times four each step),
# then the whole history: the newest pages cost what they cost, an old cut more.
_LOCATE_STEPS = 6
# A search by id prefix reads at most this many summaries per page of results, so that a
# search on a huge store answers in bounded time (the page then offers to search on).
_SEARCH_SCAN = 5_000
_LIST_BATCH = 500
_MAX_FORM_BYTES = 64 * 1024

_SECURITY_HEADERS = {
    # No script at all, styles from this server only, forms post only back to it.
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # The access token is in the first URL: never send it to another site. Not
    # "no-referrer": under it a browser posts forms with "Origin: null", which the
    # origin check must refuse.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[Request], Awaitable[Response]]


def _url(path: str, **params: Any) -> str:
    """*path* with the query parameters that are not None (values URL-encoded)."""
    query = urlencode({k: v for k, v in params.items() if v is not None and v != ""})
    return f"{path}?{query}" if query else path


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "never expires"
    seconds = math.floor(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    parts += [f"{hours}h"] if hours or days else []
    parts += [f"{minutes}m", f"{secs}s"]
    return " ".join(parts)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("agentsessions_cli", "inspect_templates"),
        autoescape=True,  # every template, whatever its name: all of them are HTML
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["url"] = _url
    env.filters["when"] = _when
    env.filters["duration"] = _duration
    return env


class _Inspector:
    def __init__(
        self,
        connect: Callable[[], SessionManager],
        *,
        token: str,
        allow_writes: bool,
        allowed_hosts: set[str],
        keyring_given: bool,
    ) -> None:
        self._connect = connect
        self._manager: SessionManager | None = None
        self.token = token
        self.allow_writes = allow_writes
        self.allowed_hosts = allowed_hosts
        self.keyring_given = keyring_given
        digest = hashlib.sha256(token.encode()).hexdigest()
        # Cookies are not kept apart by port: the name tells two inspectors apart.
        self.cookie = f"agentsessions_inspect_{digest[:12]}"
        self.csrf = hmac.new(token.encode(), b"csrf", hashlib.sha256).hexdigest()
        self.env = _environment()

    @property
    def manager(self) -> SessionManager:
        assert self._manager is not None, "the app's lifespan opens the manager"
        return self._manager

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # Opened on the server's own event loop: a manager's connections belong to one loop.
        async with self._connect() as manager:
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None

    # -- guard ---------------------------------------------------------------------------

    def _authorized(self, request: Request) -> bool:
        given = request.cookies.get(self.cookie) or request.query_params.get("token") or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def guard(self, handler: Handler, *, write: bool = False) -> Handler:
        """*handler* behind the host check, the token and (for writes) the flag and CSRF."""

        async def endpoint(request: Request) -> Response:
            response = await self._guarded(request, handler, write)
            response.headers.update(_SECURITY_HEADERS)
            return response

        return endpoint

    async def _guarded(self, request: Request, handler: Handler, write: bool) -> Response:
        # A page of another site that resolves its own name to 127.0.0.1 (DNS rebinding)
        # sends its own name as Host: answer only to the names this server was bound as.
        if request.headers.get("host", "") not in self.allowed_hosts:
            return self._message(
                request,
                "Unknown host",
                "This server answers on loopback only.",
                421,
                show_store=False,
            )
        if not self._authorized(request):
            return self._message(
                request,
                "Access token required",
                "Open the address that `agentsessions inspect` printed: it holds this "
                "server's access token.",
                401,
                show_store=False,  # not even which store: the token is the credential
            )
        if "token" in request.query_params:
            # Keep the token in a cookie and out of the address bar and history.
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            response: Response = RedirectResponse(_url(request.url.path, **rest), 303)
            response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
            return response
        if write:
            refused = await self._check_write(request)
            if refused is not None:
                return refused
        try:
            return await handler(request)
        except SessionDecryptionError as exc:
            return self._message(
                request, "Cannot decrypt this session", self._decrypt_help(exc), 409
            )
        except BackendUnavailableError as exc:
            return self._message(request, "The store cannot be reached", str(exc), 503)
        except InvalidInputError as exc:
            return self._message(request, "Bad request", str(exc), 400)
        except SessionError as exc:
            return self._message(request, type(exc).__name__, str(exc), 409)

    def _decrypt_help(self, exc: SessionDecryptionError) -> str:
        if not self.keyring_given:
            return (
                f"{exc} This store's sessions are encrypted and no keys were given: start "
                f"`agentsessions inspect` with {KEYS_VARIABLE} set to the store's keyring "
                "(see the encryption page of the docs)."
            )
        return f"{exc} The keyring given does not open it: is a key missing from {KEYS_VARIABLE}?"

    def _read_only(self, request: Request) -> Response:
        return self._message(
            request,
            "Read-only",
            "This inspector is read-only: start it with --allow-writes to delete, "
            "rewind or fork sessions.",
            403,
        )

    async def _check_write(self, request: Request) -> Response | None:
        if not self.allow_writes:
            return self._read_only(request)
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.headers['host']}":
            return self._message(request, "Refused", "The form came from another site.", 403)
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return self._message(request, "Refused", "The form came from another site.", 403)
        form = await self._form(request)
        if form is None:
            return self._message(request, "Bad request", "The form is too large.", 413)
        if not hmac.compare_digest(form.get("csrf", "").encode(), self.csrf.encode()):
            return self._message(
                request,
                "Refused",
                "The form's CSRF token is missing or wrong: reload the page and try again.",
                403,
            )
        request.state.form = form
        return None

    async def _form(self, request: Request) -> dict[str, str] | None:
        """The urlencoded body, one value per name (parsed here: no multipart dependency)."""
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM_BYTES:
                return None
        parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        return {name: values[0] for name, values in parsed.items()}

    # -- rendering -----------------------------------------------------------------------

    def render(
        self,
        request: Request,
        name: str,
        status: int = 200,
        *,
        show_store: bool = True,
        **context: Any,
    ) -> Response:
        template = self.env.get_template(name)
        html = template.render(
            store=self.manager.url if self._manager is not None and show_store else "",
            allow_writes=self.allow_writes,
            csrf=self.csrf,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    def _message(
        self, request: Request, title: str, text: str, status: int, *, show_store: bool = True
    ) -> Response:
        return self.render(
            request, "message.html", status, show_store=show_store, title=title, text=text
        )

    # -- pages ---------------------------------------------------------------------------

    async def sessions(self, request: Request) -> Response:
        params = request.query_params
        user = params.get("user") or None
        prefix = params.get("prefix") or ""
        cursor = params.get("cursor") or None
        if prefix:
            items, next_cursor, scanned = await self._search(user, prefix, cursor)
        else:
            page = await self.manager.list_sessions(
                user_id=user, limit=SESSIONS_PER_PAGE, cursor=cursor
            )
            items, next_cursor, scanned = page.items, page.next_cursor, len(page.items)
        return self.render(
            request,
            "sessions.html",
            items=items,
            user=user or "",
            prefix=prefix,
            cursor=cursor,
            next_cursor=next_cursor,
            scanned=scanned,
            done=params.get("done", ""),
        )

    async def _search(
        self, user: str | None, prefix: str, cursor: str | None
    ) -> tuple[list[SessionSummary], str | None, int]:
        """Sessions whose id starts with *prefix*, newest first, reading pages of the
        listing until a page of results is full or `_SEARCH_SCAN` summaries were read."""
        found: list[SessionSummary] = []
        scanned = 0
        while scanned < _SEARCH_SCAN:
            page = await self.manager.list_sessions(user_id=user, limit=_LIST_BATCH, cursor=cursor)
            scanned += len(page.items)
            found += [s for s in page.items if s.session_id.startswith(prefix)]
            cursor = page.next_cursor
            if cursor is None or len(found) >= SESSIONS_PER_PAGE:
                break
        # A page cut short of its matches would lose the rest: results pages end where
        # a listing page ends, so at most a listing page's worth of extra matches shows.
        return found, cursor, scanned

    def _session_id(self, request: Request) -> str:
        session_id = request.query_params.get("id", "")
        if not session_id:
            raise InvalidInputError("no session id given (?id=...)")
        return session_id

    def _page_number(self, request: Request) -> int:
        raw = request.query_params.get("page", "0")
        if not raw.isdigit() or int(raw) > MAX_PAGE:
            raise InvalidInputError(f"page must be a whole number from 0 to {MAX_PAGE}")
        return int(raw)

    async def _absent(self, request: Request, session_id: str) -> Response:
        return self._message(
            request, "No such session", f"Session {session_id!r} does not exist (or expired).", 404
        )

    async def session(self, request: Request) -> Response:
        session_id = self._session_id(request)
        if "event" in request.query_params and "page" not in request.query_params:
            return await self._locate(request, session_id, request.query_params["event"])
        number = self._page_number(request)
        session = await self.manager.get(session_id, last_events=last_events_for(number))
        if session is None:
            return await self._absent(request, session_id)
        page = event_page(session, number)
        if number > 0 and not page.events:
            return self._message(
                request, "No such page", f"Session {session_id!r} has {page.pages} pages.", 404
            )
        calls = pending_calls(session.state)
        now = datetime.now(timezone.utc)
        ttl = self.manager.options.ttl
        branching = self.manager.capabilities.branching
        origin = session.forked_from
        source = None
        if origin is not None:
            source = await self.manager.get(origin.session_id, last_events=0)
        branches_cursor = request.query_params.get("branches") or None
        branches: list[SessionSummary] = []
        next_branches: str | None = None
        if branching:
            forks = await self.manager.list_sessions(
                forked_from=session_id, limit=BRANCHES_PER_PAGE, cursor=branches_cursor
            )
            branches, next_branches = forks.items, forks.next_cursor
        return self.render(
            request,
            "session.html",
            session=session,
            page=page,
            items=timeline(page.events, {call.id for call in calls}),
            pending=calls,
            ttl_left=ttl_left(session.updated_at, ttl, now),
            state_bytes=json_size(session.state),
            page_bytes=sum(json_size(event.model_dump(mode="json")) for _, event in page.events),
            origin=origin,
            source_version=None if source is None else source.version,
            branching=branching,
            branches=branches,
            branches_cursor=branches_cursor,
            next_branches=next_branches,
            branches_per_page=BRANCHES_PER_PAGE,
            per_page=EVENTS_PER_PAGE,
            has_archive=self.manager.capabilities.compaction,
            done=request.query_params.get("done", ""),
        )

    async def _locate(self, request: Request, session_id: str, event_id: str) -> Response:
        """Redirect to the page of *session_id* that shows *event_id* (a fork's cut),
        reading ever longer tails of the history until it is found or the history ends."""
        want: int | None = EVENTS_PER_PAGE
        for step in range(_LOCATE_STEPS + 1):
            if step == _LOCATE_STEPS:
                want = None  # the last step reads the whole history
            session = await self.manager.get(session_id, last_events=want)
            if session is None:
                return await self._absent(request, session_id)
            index = next((i for i, e in enumerate(session.events) if e.id == event_id), None)
            if index is not None:
                position = session.first_event_position + index
                total = session.first_event_position + len(session.events)
                number = (total - 1 - position) // EVENTS_PER_PAGE
                where = _url("/session", id=session_id, page=number)
                return RedirectResponse(f"{where}#e{position}", 303)
            if session.first_event_position == 0 or want is None:
                break
            want *= 4
        return self._message(
            request,
            "No such event",
            f"Session {session_id!r} no longer holds event {event_id!r} (rewound or "
            "compacted since?).",
            404,
        )

    async def archive(self, request: Request) -> Response:
        session_id = self._session_id(request)
        number = self._page_number(request)
        events = await self.manager.archived_events(session_id)
        total = len(events)
        end = max(0, total - EVENTS_PER_PAGE * number)
        first = max(0, end - EVENTS_PER_PAGE)
        shown = [(index, events[index]) for index in range(first, end)]
        return self.render(
            request,
            "archive.html",
            session_id=session_id,
            items=timeline(shown, set()),
            total=total,
            number=number,
            has_older=first > 0,
        )

    async def export(self, request: Request) -> Response:
        session_id = self._session_id(request)
        session = await self.manager.get(session_id)
        if session is None:
            return await self._absent(request, session_id)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in session_id)[:100]
        return Response(
            session.model_dump_json() + "\n",
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{safe or "session"}.jsonl"'},
        )

    async def stylesheet(self, request: Request) -> Response:
        css = importlib.resources.files("agentsessions_cli").joinpath(
            "inspect_templates/inspect.css"
        )
        return Response(css.read_text(encoding="utf-8"), media_type="text/css")

    # -- writes ----------------------------------------------------------------------------

    async def confirm(self, request: Request) -> Response:
        if not self.allow_writes:
            return self._read_only(request)
        action = request.query_params.get("action", "")
        if action not in ("delete", "rewind", "fork"):
            raise InvalidInputError("action must be delete, rewind or fork")
        session_id = self._session_id(request)
        event_id = request.query_params.get("event", "")
        if action != "delete" and not event_id:
            raise InvalidInputError(f"{action} needs the event to cut at (?event=...)")
        if action == "fork" and not self.manager.capabilities.branching:
            return self._no_fork(request)
        return self.render(
            request,
            "confirm.html",
            action=action,
            session_id=session_id,
            event_id=event_id,
            position=request.query_params.get("position", ""),
            branching=self.manager.capabilities.branching,
        )

    def _no_fork(self, request: Request) -> Response:
        return self._message(
            request,
            "Fork not supported",
            f"This store's backend ({type(self.manager).__name__}) does not declare "
            "capabilities.branching, so it cannot fork: a copy made here would not record "
            "where it came from nor be listed among the source's branches. Nothing was "
            "written. `agentsessions copy` copies sessions to another store.",
            501,
        )

    def _field(self, request: Request, name: str) -> str:
        value: str = request.state.form.get(name, "")
        if not value:
            raise InvalidInputError(f"the form has no {name!r}")
        return value

    async def delete(self, request: Request) -> Response:
        session_id = self._field(request, "id")
        if not await self.manager.delete(session_id):
            return await self._absent(request, session_id)
        return RedirectResponse(_url("/", done=f"deleted {session_id}"), 303)

    async def rewind(self, request: Request) -> Response:
        """Keep the events up to and including the one given; read only the tail after it.

        With ``capabilities.branching`` the manager's `rewind` drops the rest (archiving
        it when asked); without, a save of the tail cut after the event does (no archive).
        """
        session_id = self._field(request, "id")
        event_id = self._field(request, "event")
        position = self._position(request)
        archive = request.state.form.get("archive", "") == "on"
        branching = self.manager.capabilities.branching
        if archive and not branching:
            raise InvalidInputError(
                f"this store's backend ({type(self.manager).__name__}) cannot archive what a "
                "rewind drops (capabilities.branching is False): nothing was written"
            )
        newest = await self.manager.get(session_id, last_events=1)
        if newest is None:
            return await self._absent(request, session_id)
        total = newest.first_event_position + len(newest.events)
        if position >= total:
            raise InvalidInputError(
                f"session {session_id!r} has {total} events, none at {position}"
            )
        tail = await self.manager.get(session_id, last_events=total - position)
        if tail is None:
            return await self._absent(request, session_id)
        if tail.first_event_position != position or tail.events[0].id != event_id:
            raise InvalidInputError(
                f"event {event_id!r} is no longer at position {position} of session "
                f"{session_id!r}: it changed since the page was shown; reload it"
            )
        dropped = len(tail.events) - 1
        # Both version-checked: a save in between is a conflict and nothing is written.
        if branching:
            await self.manager.rewind(tail, event_id, archive=archive)
        else:
            del tail.events[1:]
            await self.manager.save(tail)
        done = f"rewound: {dropped} events dropped" + (" (archived)" if archive else "")
        return RedirectResponse(_url("/session", id=session_id, done=done), 303)

    def _position(self, request: Request) -> int:
        raw = self._field(request, "position")
        if not raw.isdigit():
            raise InvalidInputError("position must be a whole number")
        return int(raw)

    async def fork(self, request: Request) -> Response:
        """The manager's `fork` at the event given: one atomic step that copies the
        events up to and including it and the state, and never overwrites."""
        if not self.manager.capabilities.branching:
            return self._no_fork(request)
        session_id = self._field(request, "id")
        event_id = self._field(request, "event")
        new_id = self._field(request, "new_id")
        try:
            await self.manager.fork(session_id, new_id, through_event_id=event_id)
        except SessionNotFoundError:
            return await self._absent(request, session_id)
        except SessionExistsError:
            raise InvalidInputError(
                f"session {new_id!r} exists already: nothing was written; choose another id"
            ) from None
        return RedirectResponse(_url("/session", id=new_id, done=f"forked from {session_id}"), 303)


def create_app(
    connect: Callable[[], SessionManager],
    *,
    token: str,
    allow_writes: bool = False,
    allowed_hosts: set[str],
    keyring_given: bool = False,
) -> Starlette:
    """The inspector as an ASGI app. *connect* makes the manager, opened by the app's
    lifespan; *token* is required by every request (``?token=`` once, then a cookie);
    *allowed_hosts* are the ``Host`` header values answered (``127.0.0.1:PORT``, ...)."""
    inspector = _Inspector(
        connect,
        token=token,
        allow_writes=allow_writes,
        allowed_hosts=allowed_hosts,
        keyring_given=keyring_given,
    )
    guard = inspector.guard
    routes = [
        Route("/", guard(inspector.sessions)),
        Route("/session", guard(inspector.session)),
        Route("/session/archive", guard(inspector.archive)),
        Route("/session/export", guard(inspector.export)),
        Route("/session/confirm", guard(inspector.confirm)),
        Route("/inspect.css", guard(inspector.stylesheet)),
        Route("/session/delete", guard(inspector.delete, write=True), methods=["POST"]),
        Route("/session/rewind", guard(inspector.rewind, write=True), methods=["POST"]),
        Route("/session/fork", guard(inspector.fork, write=True), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=inspector.lifespan)
