"""The demo agent's rules: it learns from messages and answers from the session's events."""

from __future__ import annotations

import pytest
from agentsessions import SessionManager, connect
from agentsessions.runtime import ExecutionContext
from agentsessions_cli._demo import DemoAgent, SentNote, recall, second_person


async def converse(agent: DemoAgent, *messages: str, session_id: str = "s") -> list[str]:
    replies = []
    for message in messages:
        result = await agent.run(message, session_id=session_id)
        replies.append(result.reply or "")
    return replies


@pytest.mark.parametrize(
    ("said", "name"),
    [
        ("Hi, I'm Ada", "Ada"),
        ("hello, i'm ada", "Ada"),
        ("My name is Ada.", "Ada"),
        ("my name is ada lovelace", "Ada Lovelace"),
        ("Call me Grace!", "Grace"),
        ("I\u2019m Ada", "Ada"),  # a phone's curly apostrophe
        ("Hi, I'm Ada and I like tea", "Ada"),
    ],
)
async def test_it_learns_a_name(said: str, name: str) -> None:
    agent = DemoAgent()
    first, answer = await converse(agent, said, "What's my name?")
    assert f"Nice to meet you, {name}!" in first
    assert answer == f"Your name is {name}."


@pytest.mark.parametrize("said", ["I'm fine", "I'm going home", "i'm tired.", "I am not sure"])
async def test_phrases_that_are_not_names_teach_nothing(said: str) -> None:
    agent = DemoAgent()
    _, answer = await converse(agent, said, "What's my name?")
    assert answer.startswith("I don't know your name yet")


async def test_likes_dislikes_and_facts() -> None:
    agent = DemoAgent()
    replies = await converse(
        agent,
        "I like tea, cake and long walks",
        "I love jazz too",
        "I don't like cake anymore",
        "Remember that my cat is called Tom",
        "What do I like?",
        "Do I like jazz?",
        "Do I like cake?",
        "Do I like golf?",
        "What is my cat called?",
        "What do you remember about me?",
    )
    assert replies[0] == "Noted: you like tea, cake and long walks."
    assert replies[2] == "Noted: you don't like cake."
    assert replies[3] == "Got it. I'll remember that your cat is called Tom."
    assert replies[4] == "You like tea, long walks and jazz."
    assert replies[5] == "Yes, you told me you like jazz."
    assert replies[6] == "No, you told me you don't like cake."
    assert replies[7] == "You haven't told me whether you like golf."
    assert replies[8] == "You told me that your cat is called Tom."
    assert replies[9] == (
        "Here's what I remember: you like tea, long walks and jazz; you don't like cake; "
        "your cat is called Tom."
    )


async def test_answers_come_from_the_sessions_events() -> None:
    # What another agent object (another process, say) stored is what this one knows.
    async with connect("memory://") as memory_manager:
        await _answers_from_events(memory_manager)


async def _answers_from_events(memory_manager: SessionManager) -> None:
    await DemoAgent(memory_manager).run("my name is Ada", session_id="s")
    fresh_agent = DemoAgent(memory_manager)
    assert (await fresh_agent.run("Who am I?", session_id="s")).reply == "Your name is Ada."
    stored = await memory_manager.get("s")
    assert stored is not None
    assert recall(stored.events).name == "Ada"
    assert stored.state == {}  # nothing is kept beside the events


async def test_questions_with_nothing_known_say_how_to_teach() -> None:
    agent = DemoAgent()
    replies = await converse(
        agent, "What do I like?", "What do you remember about me?", "What is my dog called?"
    )
    assert "I like ..." in replies[0]
    assert replies[1].startswith("Nothing yet")
    assert "remember that ..." in replies[2]


async def test_fallback_greeting_and_help() -> None:
    agent = DemoAgent()
    replies = await converse(agent, "hello", "asdf qwerty", "help", "Hi, I'm Ada", "hello")
    assert replies[0] == "Hello! What's your name?"
    assert replies[1].startswith("Sorry, I didn't understand that.") and "help" in replies[1]
    assert "send a note" in replies[2]
    assert replies[4] == "Hello again, Ada!"


async def test_sending_a_note_waits_for_approval_then_sends() -> None:
    agent = DemoAgent()
    result = await agent.run("send a note to Bob saying hello", session_id="s")
    assert result.status == "waiting_for_approval"
    assert result.reply == (
        "I need your approval to send a note to Bob: 'hello'. Reply 'approve' or 'deny'."
    )
    assert agent.sent_notes == []
    reminder = await agent.run("What's my name?", session_id="s")
    assert reminder.status == "waiting_for_approval"
    assert "Still waiting for your approval" in (reminder.reply or "")
    done = await agent.run("approve", session_id="s")
    assert done.status == "completed"
    assert done.reply == "Done: I sent a note to Bob: 'hello'."
    assert agent.sent_notes == [SentNote("Bob", "hello")]
    assert (await agent.run("approve", session_id="s")).reply == (
        "There is nothing waiting for your approval."
    )
    assert agent.sent_notes == [SentNote("Bob", "hello")]


async def test_denying_a_note_records_the_refusal() -> None:
    agent = DemoAgent()
    await agent.run("Send a message to Eve: see you at 5", session_id="s")
    result = await agent.run("deny", session_id="s")
    assert result.reply == "OK, I did not send a note to Eve: 'see you at 5'."
    assert agent.sent_notes == []
    stored = await agent.manager.get("s")
    assert stored is not None
    assert "tool_denied" in [e.metadata.get("kind") for e in stored.events]


async def test_a_note_without_text_asks_for_it() -> None:
    agent = DemoAgent()
    result = await agent.run("send a note to Bob", session_id="s")
    assert result.status == "completed"
    assert result.reply == "What should the note to Bob say? Try: send a note to Bob saying hello."


async def test_without_session_the_note_request_says_it_cannot_wait() -> None:
    result = await DemoAgent().run("send a note to Bob saying hi")
    assert "cannot wait for your answer" in (result.reply or "")
    assert not result.stored


async def test_empty_message_gets_no_reply_and_records_nothing() -> None:
    context = ExecutionContext()
    assert await DemoAgent().step(context, "   ") is None
    assert context.events == []


def test_second_person() -> None:
    assert second_person("my cat likes me") == "your cat likes you"
    assert second_person("I'm from Paris") == "you're from Paris"
