"""A deterministic demo agent: no network, no model, just a session's memory.

It learns from what the user says (a name, likes, facts to remember), answers
questions about them by re-reading the session's events, so what it knows is exactly
what the store kept, and has one tool that waits for a human's approval (sending a
note). The rules are plain regular expressions; anything they do not understand
gets a reply saying what the agent can do.

>>> import asyncio
>>> agent = DemoAgent()
>>> _ = asyncio.run(agent.run("Hi, I'm Ada", session_id="s"))
>>> asyncio.run(agent.run("What's my name?", session_id="s")).reply
'Your name is Ada.'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentsessions import Event, SessionManager
from agentsessions.runtime import Agent, Approval, ConflictPolicy, ExecutionContext, PendingToolCall

__all__ = ["DemoAgent", "Memory", "SentNote", "recall"]

# A message event: what the user typed, as opposed to an approval or a tool result.
MESSAGE = "message"

_WORD = r"[^\W\d_][\w'-]*"
_STRONG_NAME = re.compile(
    r"(?i:\b(?:my name is|my name's|call me|the name's|the name is))\s+(?P<rest>.+)"
)
# "I'm X" names someone only when X looks like a name and ends the clause, so that
# "I'm going home" or "I'm fine" teach nothing.
_WEAK_NAME = re.compile(rf"(?i:\b(?:i'm|i am|im|this is))\s+(?P<name>{_WORD})\s*[,.!]*$")
_NOT_NAMES = frozenset(
    """afraid alright also back busy done fine glad good great happy here home hungry
    interested just not ok okay ready sad so sorry still sure thirsty tired very well
    back bored confused curious excited lost new sick cold hot late early""".split()  # noqa: SIM905
)
_GREETING = re.compile(r"(?i)^\s*(?:hi|hello|hey|hiya|howdy|good (?:morning|afternoon|evening))\b")
_GREETING_ONLY = re.compile(
    r"(?i)^\s*(?:hi|hello|hey|hiya|howdy|good (?:morning|afternoon|evening))"
    r"(?:\s+there)?[\s!.,]*$"
)
_LIKE = re.compile(
    r"(?i:\bi\s+(?:really\s+|also\s+|do\s+|quite\s+)?(?:like|love|enjoy|adore))\s+(?P<what>.+)"
)
_DISLIKE = re.compile(
    r"(?i:\bi\s+(?:(?:don't|dont|do not|no longer|never)\s+(?:like|love|enjoy)|hate|dislike))"
    r"\s+(?P<what>.+)"
)
_REMEMBER = re.compile(r"(?i:\b(?:please\s+)?remember\s+(?:that\s+)?)(?P<fact>.+)")
_SEND_NOTE = re.compile(
    r"(?i:\bsend\s+(?:a\s+|an\s+)?(?:note|message)\s+to)\s+(?P<to>[\w.@+-]+)"
    r"(?:\s*(?:saying|that says|that|:|with the text|with)\s*(?P<text>.*))?$",
    re.DOTALL,
)
_APPROVE = re.compile(
    r"(?i)^\s*(?:approve[ds]?|yes|y|ok|okay|sure|go ahead|send it|do it)\b[\s,.:!-]*(?P<note>.*)$"
)
_DENY = re.compile(
    r"(?i)^\s*(?:deny|denied|no|n|nope|cancel|don't|do not|reject)\b[\s,.:!-]*(?P<note>.*)$"
)
_ASK_NAME = re.compile(
    r"(?i)\b(?:what(?:'s| is) my name|who am i|do you (?:know|remember) (?:my name|who i am)"
    r"|what do you call me)\b"
)
_ASK_LIKES = re.compile(
    r"(?i)\b(?:what (?:do|did) i (?:say i )?(?:like|love|enjoy)|what are (?:my|the things i) "
    r"(?:likes|like)|what (?:things )?do i like)\b"
)
_ASK_DO_I_LIKE = re.compile(r"(?i)^\s*do i (?:like|love|enjoy)\s+(?P<what>.+?)\s*\??\s*$")
_ASK_ALL = re.compile(
    r"(?i)\b(?:what do you (?:remember|know)|what have i told you|tell me (?:about|what you "
    r"know about) (?:me|myself)|what do you know)\b"
)
_HELP = re.compile(r"(?i)^\s*(?:help|\?|what can you do|how does this work)\b")
_THANKS = re.compile(r"(?i)^\s*(?:thanks|thank you|thx|cheers)\b")
_QUESTION_START = re.compile(
    r"(?i)^\s*(?:what|who|which|where|when|why|how|do|does|did|can|could|is|are|am)\b"
)
_CLAUSE = re.compile(r"[^.!?;\n]+[.!?;]*")
_AND_CLAUSE = re.compile(
    r"(?i),?\s+(?:and|but)\s+(?=(?:i|i'm|my|remember|please|what|who|do you)\b)"
)
_TRAILING = re.compile(
    r"(?i)(?:\s+(?:too|as well|a lot|very much|so much|a bit|anymore|any more))+\s*$"
)
_PERSPECTIVE = {
    "i": "you",
    "me": "you",
    "my": "your",
    "mine": "yours",
    "myself": "yourself",
    "am": "are",
    "i'm": "you're",
    "i've": "you've",
    "i'll": "you'll",
    "i'd": "you'd",
    "you": "I",
    "your": "my",
    "yours": "mine",
}
_STOPWORDS = frozenset(
    """a an the is are was were be been my your i you me what whats what's who whom which
    how do does did of to in on at for with and or it its it's that this called name
    named tell about know remember please can could would""".split()  # noqa: SIM905
)
_APPROVAL_HINT = "Reply 'approve' or 'deny'."
_CAPABILITIES = (
    "I'm a simple rule-based demo agent (no language model). I can remember your name "
    "('my name is Ada'), what you like ('I like tea') and facts ('remember that my cat is "
    "called Tom'); answer 'What's my name?', 'What do I like?' and 'What do you remember "
    "about me?'; and send a note once you approve it ('send a note to Bob saying hello')."
)


@dataclass
class Memory:
    """What the user has told the agent, rebuilt from the session's events."""

    name: str | None = None
    likes: list[str] = field(default_factory=list)
    dislikes: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.name or self.likes or self.dislikes or self.facts)


@dataclass(frozen=True)
class SentNote:
    """A note the send_note tool delivered (in this process)."""

    to: str
    text: str


@dataclass
class _Learned:
    name: str | None = None
    likes: list[str] = field(default_factory=list)
    dislikes: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)


def _clauses(text: str) -> list[str]:
    parts: list[str] = []
    for match in _CLAUSE.finditer(text):
        for piece in _AND_CLAUSE.split(match.group(0)):
            if piece.strip(" \t,"):
                parts.append(piece.strip(" \t,"))
    return parts


def _clean(phrase: str) -> str:
    phrase = phrase.strip().rstrip(".!?;,").strip()
    phrase = _TRAILING.sub("", phrase)
    return phrase.strip("\"' \u201c\u201d\u2018\u2019").strip()


def _normalise(text: str) -> str:
    # Phones and word processors type curly apostrophes ("I\u2019m").
    return text.replace("\u2019", "'").replace("\u2018", "'").strip()


def _learn(text: str) -> _Learned:
    """What one user message teaches; questions teach nothing."""
    learned = _Learned()
    text = _normalise(text)
    note = _SEND_NOTE.search(text)
    if note:
        text = text[: note.start()]
    for clause in _clauses(text):
        if clause.endswith("?") or _QUESTION_START.match(clause):
            continue
        name = _name_in(clause)
        if name:
            learned.name = name
        dislike = _DISLIKE.search(clause)
        like = None if dislike else _LIKE.search(clause)
        if dislike:
            learned.dislikes.extend(_things(dislike.group("what")))
        elif like:
            learned.likes.extend(_things(like.group("what")))
        fact = _REMEMBER.search(clause)
        if fact and len(_clean(fact.group("fact")).split()) >= 2:
            learned.facts.append(_clean(fact.group("fact")))
    learned.likes = [like for like in learned.likes if like]
    learned.dislikes = [dislike for dislike in learned.dislikes if dislike]
    return learned


def _things(phrase: str) -> list[str]:
    """ "tea, cake and long walks" as three things."""
    return [_clean(part) for part in re.split(r"\s*,\s*(?:and\s+)?|\s+and\s+|\s*&\s*", phrase)]


def _name_in(clause: str) -> str | None:
    strong = _STRONG_NAME.search(clause)
    if strong:
        words = strong.group("rest").split(",")[0].rstrip(".!;").split()
        if not words or not re.fullmatch(_WORD, words[0]):
            return None
        # "my name is ada lovelace" is a whole name; in a longer clause only the
        # capitalised words that follow the first one belong to it.
        if len(words) > 3 or not all(re.fullmatch(_WORD, word) for word in words):
            words = [words[0], *_leading_capitalised(words[1:])]
        return _title(" ".join(words))
    weak = _WEAK_NAME.search(clause)
    if weak is None:
        return None
    name = weak.group("name")
    if name.lower() in _NOT_NAMES:
        return None
    # Lower-case "i'm ada" counts only after a greeting, where a name is expected.
    if name[0].isupper() or _GREETING.match(clause):
        return _title(name)
    return None


def _leading_capitalised(words: list[str]) -> list[str]:
    taken = []
    for word in words:
        if not (word[:1].isupper() and re.fullmatch(_WORD, word)):
            break
        taken.append(word)
    return taken


def _title(name: str) -> str:
    return " ".join(word[:1].upper() + word[1:] for word in name.split())


def _add(items: list[str], item: str) -> None:
    """Append *item* unless present (case-insensitively), keeping the first spelling's slot."""
    if item.lower() not in {existing.lower() for existing in items}:
        items.append(item)


def _drop(items: list[str], item: str) -> None:
    items[:] = [existing for existing in items if existing.lower() != item.lower()]


def user_messages(events: Iterable[Event]) -> list[str]:
    """The text of every message the user typed, oldest first."""
    return [
        event.content
        for event in events
        if event.author == "user"
        and isinstance(event.content, str)
        and event.metadata.get("kind", MESSAGE) == MESSAGE
    ]


def recall(events: Iterable[Event]) -> Memory:
    """Everything the user's messages in *events* taught, later statements winning."""
    memory = Memory()
    for text in user_messages(events):
        learned = _learn(text)
        if learned.name:
            memory.name = learned.name
        for like in learned.likes:
            _drop(memory.dislikes, like)
            _add(memory.likes, like)
        for dislike in learned.dislikes:
            _drop(memory.likes, dislike)
            _add(memory.dislikes, dislike)
        for fact in learned.facts:
            _add(memory.facts, fact)
    return memory


def second_person(text: str) -> str:
    """*text* as the agent says it back: "my cat" becomes "your cat"."""
    words = re.split(r"(\w+(?:'\w+)?)", text)  # "I'm" is one word
    out = []
    for word in words:
        swapped = _PERSPECTIVE.get(word.lower())
        out.append(swapped if swapped is not None else word)
    return "".join(out)


def _listing(items: list[str]) -> str:
    spoken = [second_person(item) for item in items]
    if len(spoken) == 1:
        return spoken[0]
    return ", ".join(spoken[:-1]) + " and " + spoken[-1]


def _keywords(text: str) -> set[str]:
    return {
        word
        for word in re.findall(r"[a-z0-9']+", text.lower())
        if word not in _STOPWORDS and len(word) > 1
    }


def _note_summary(call: PendingToolCall) -> str:
    return f"a note to {call.arguments.get('to')}: '{call.arguments.get('text')}'"


class DemoAgent(Agent):
    """The demo agent. ``sent_notes`` lists the notes its tool delivered in this process."""

    name = "agent"

    def __init__(
        self,
        manager: SessionManager | None = None,
        *,
        last_events: int | None = None,
        on_conflict: ConflictPolicy = "merge",
    ) -> None:
        super().__init__(manager, last_events=last_events, on_conflict=on_conflict)
        self.sent_notes: list[SentNote] = []
        self.tools.register(self.send_note, name="send_note", requires_approval=True)

    def send_note(self, to: str, text: str) -> dict[str, Any]:
        """Deliver a note to someone (here: keep it, and the session records the result)."""
        self.sent_notes.append(SentNote(to, text))
        return {"delivered_to": to, "text": text}

    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        text = _normalise(message or "")
        if not text:
            if context.outcomes:  # a run that only carried an Approval
                reply = " ".join(
                    _describe(outcome.call, outcome.status) for outcome in context.outcomes
                )
                context.add_event(self.name, reply, kind=MESSAGE)
                return reply
            return None
        context.add_event("user", message, kind=MESSAGE)
        reply = await self._reply(context, text)
        context.add_event(self.name, reply, kind=MESSAGE)
        return reply

    async def _reply(self, context: ExecutionContext, text: str) -> str:
        pending = context.pending_calls
        if pending:
            decision = _APPROVE.match(text) or _DENY.match(text)
            if decision is not None:
                call = pending[0]
                approved = decision.re is _APPROVE
                outcome = await context.resolve(
                    Approval(call_id=call.id, approved=approved, note=decision.group("note"))
                )
                reply = _describe(call, outcome.status, outcome.error)
                if len(pending) > 1:
                    reply += " " + self._waiting_line(pending[1])
                return reply
        elif re.fullmatch(r"(?i)\s*(?:approve[ds]?|deny|denied)\b.*", text):
            return "There is nothing waiting for your approval."

        parts: list[str] = []
        note = _SEND_NOTE.search(text)
        before_note = text[: note.start()] if note else text
        memory = recall(context.events)
        parts.extend(self._answer(before_note, memory))
        if note:
            parts.append(await self._ask_to_send(context, note))
        if not parts:
            parts.append(self._fallback(text, memory))
        reply = " ".join(parts)
        if pending and not note:
            reply += " " + self._waiting_line(pending[0])
        return reply

    def _answer(self, text: str, memory: Memory) -> list[str]:
        parts: list[str] = []
        learned = _learn(text)
        if _GREETING_ONLY.match(text):
            return [f"Hello again, {memory.name}!" if memory.name else "Hello! What's your name?"]
        if learned.name:
            parts.append(f"Nice to meet you, {learned.name}!")
        if learned.likes:
            parts.append(f"Noted: you like {_listing(learned.likes)}.")
        if learned.dislikes:
            parts.append(f"Noted: you don't like {_listing(learned.dislikes)}.")
        if learned.facts:
            parts.append(f"Got it. I'll remember that {_listing(learned.facts)}.")
        for clause in _clauses(text):
            answer = self._answer_question(clause, memory)
            if answer:
                parts.append(answer)
        return parts

    def _answer_question(self, clause: str, memory: Memory) -> str | None:
        if _HELP.match(clause):
            return _CAPABILITIES
        if _THANKS.match(clause):
            return "You're welcome!"
        if _ASK_NAME.search(clause):
            if memory.name:
                return f"Your name is {memory.name}."
            return "I don't know your name yet. Tell me with 'my name is ...'."
        do_i_like = _ASK_DO_I_LIKE.match(clause)
        if do_i_like:
            what = _clean(do_i_like.group("what"))
            if what.lower() in {like.lower() for like in memory.likes}:
                return f"Yes, you told me you like {second_person(what)}."
            if what.lower() in {dislike.lower() for dislike in memory.dislikes}:
                return f"No, you told me you don't like {second_person(what)}."
            return f"You haven't told me whether you like {second_person(what)}."
        if _ASK_LIKES.search(clause):
            if memory.likes:
                return f"You like {_listing(memory.likes)}."
            return "You haven't told me what you like yet. Tell me with 'I like ...'."
        if _ASK_ALL.search(clause):
            return self._everything(memory)
        if clause.endswith("?") and re.search(r"(?i)\b(?:my|i)\b", clause):
            return self._fact_about(clause, memory)
        return None

    def _everything(self, memory: Memory) -> str:
        if memory.empty:
            return "Nothing yet: tell me your name, what you like, or something to remember."
        known = []
        if memory.name:
            known.append(f"your name is {memory.name}")
        if memory.likes:
            known.append(f"you like {_listing(memory.likes)}")
        if memory.dislikes:
            known.append(f"you don't like {_listing(memory.dislikes)}")
        known.extend(second_person(fact) for fact in memory.facts)
        return "Here's what I remember: " + "; ".join(known) + "."

    def _fact_about(self, question: str, memory: Memory) -> str:
        wanted = _keywords(question)
        best, score = None, 0
        for fact in memory.facts:
            overlap = len(wanted & _keywords(fact))
            if overlap > score:
                best, score = fact, overlap
        if best is None:
            return "I don't know that yet. Tell me with 'remember that ...'."
        return f"You told me that {second_person(best)}."

    async def _ask_to_send(self, context: ExecutionContext, note: re.Match[str]) -> str:
        to = note.group("to").strip(".,!?;:")
        body = _clean(note.group("text") or "")
        if not body:
            return f"What should the note to {to} say? Try: send a note to {to} saying hello."
        outcome = await context.call_tool(
            "send_note", {"to": to, "text": body}, reason="sends a note on your behalf"
        )
        reply = f"I need your approval to send {_note_summary(outcome.call)}. {_APPROVAL_HINT}"
        if not context.is_persistent:
            reply += " (This run has no session, so the request cannot wait for your answer.)"
        return reply

    def _waiting_line(self, call: PendingToolCall) -> str:
        return f"(Still waiting for your approval to send {_note_summary(call)}. {_APPROVAL_HINT})"

    def _fallback(self, text: str, memory: Memory) -> str:
        greeting = f"Sorry {memory.name}, " if memory.name else "Sorry, "
        return (
            f"{greeting}I didn't understand that. I can remember your name, what you like "
            "and facts about you, answer questions about them, and send notes with your "
            "approval. Say 'help' for examples."
        )


def _describe(call: PendingToolCall, status: str, error: str | None = None) -> str:
    if status == "done":
        return f"Done: I sent {_note_summary(call)}."
    if status == "denied":
        return f"OK, I did not send {_note_summary(call)}."
    if status == "failed":
        return f"I tried to send {_note_summary(call)}, but it failed: {error}."
    return f"Sending {_note_summary(call)} is waiting for your approval."
