"""Encryption on in the backend suites: keyrings, and a session whose plaintext is known.

Each backend's kit runs a second time with `make_keyring` on its manager, and each
backend's encryption test writes `write_secrets` and searches everything its storage
holds for the plaintext.
"""

from __future__ import annotations

import os
import uuid

from agentsessions import SessionManager
from agentsessions.encryption import Keyring

__all__ = ["SECRETS", "assert_no_plaintext", "make_keyring", "write_secrets"]

#: Distinctive plaintexts, one per place a session holds data: event content, a
#: metadata key and value, a state key and value, and an event restored from elsewhere.
SECRETS = (
    "content-7d1f0c",
    "metakey-51ab9e",
    "metavalue-c04e77",
    "statekey-9e2b31",
    "statevalue-a6f5d8",
    "restored-3c88e2",
)


def make_keyring(**kwargs: bool) -> Keyring:
    """A keyring of two fresh random keys, ``new`` writing and ``old`` readable."""
    return Keyring({"new": os.urandom(32), "old": os.urandom(32)}, current="new", **kwargs)


async def write_secrets(manager: SessionManager) -> list[str]:
    """Store `SECRETS` through every write path (create, append, rewrite, restore).

    Returns the ids written (the second one restored), after checking they read back.
    """
    content, meta_key, meta_value, state_key, state_value, restored = SECRETS
    session_id = f"enc-{uuid.uuid4().hex}"
    session = await manager.create(session_id, "owner-1", state={state_key: state_value})
    for index in range(3):
        session.add_event("user", f"{content} {index}", **{meta_key: meta_value})
    await manager.save(session)
    session.events[1] = session.events[1].model_copy(update={"content": [content, {"x": 1}]})
    session.state[state_key] = [state_value, 2]
    await manager.save(session)
    copy = session.model_copy(update={"session_id": f"{session_id}-copy"}, deep=True)
    copy.add_event("tool", restored, note=restored)
    await manager.restore(copy)
    for written in (session_id, copy.session_id):
        loaded = await manager.get(written)
        assert loaded is not None
        assert loaded.state == {state_key: [state_value, 2]}
        assert loaded.events[0].content == f"{content} 0"
        assert loaded.events[0].metadata == {meta_key: meta_value}
    return [session_id, copy.session_id]


def assert_no_plaintext(raw: str, session_ids: list[str]) -> None:
    """*raw* (everything storage holds, as text) names the sessions, and no secret."""
    for session_id in session_ids:
        assert session_id in raw, f"the raw dump does not even hold {session_id!r}: wrong place?"
    assert "owner-1" in raw  # owners stay in clear, for listing by user
    leaked = [secret for secret in SECRETS if secret in raw]
    assert not leaked, f"plaintext found in raw storage: {leaked}"
