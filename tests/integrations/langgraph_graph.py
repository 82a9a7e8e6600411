"""A LangGraph `StateGraph` with a human approval (`interrupt()`), shared by the test and
the process that resumes it: ``python langgraph_graph.py URL THREAD KEY_HEX ANSWER``
resumes the thread on a saver of its own and prints the final state as JSON."""

from __future__ import annotations

import asyncio
import json
import operator
import sys
from typing import Annotated, Any

from agentsessions.encryption import Keyring
from agentsessions.integrations.langgraph import AgentSessionsSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    approved: bool
    blob: bytes


def draft(state: State) -> dict[str, Any]:
    return {"log": ["drafted"], "blob": b"\x00\xffraw"}


def approve(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "publish the draft?", "log": state["log"]})
    return {"log": [f"answer:{answer}"], "approved": answer == "yes"}


def publish(state: State) -> dict[str, Any]:
    return {"log": ["published" if state["approved"] else "discarded"]}


def build(saver: AgentSessionsSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_node("approve", approve)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "approve")
    builder.add_edge("approve", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def keyring(key_hex: str) -> Keyring:
    return Keyring({"k": bytes.fromhex(key_hex)}, current="k")


async def resume(url: str, thread_id: str, key_hex: str, answer: str) -> dict[str, Any]:
    async with AgentSessionsSaver.from_url(url, encryption=keyring(key_hex)) as saver:
        graph = build(saver)
        config = {"configurable": {"thread_id": thread_id}}
        result: dict[str, Any] = await graph.ainvoke(Command(resume=answer), config)
        return result


if __name__ == "__main__":
    final = asyncio.run(resume(*sys.argv[1:5]))
    shown = {"log": final["log"], "approved": final["approved"], "blob": final["blob"].hex()}
    print(json.dumps(shown))
