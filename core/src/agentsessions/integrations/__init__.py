"""Adapters that make any agentsessions backend the session store of an agent framework.

Each adapter lives in its own module and imports its framework only when that module
is imported, so ``import agentsessions`` never pulls in a framework:

- `agentsessions.integrations.openai_agents`: `AgentSessionsSession`, a session for the
  OpenAI Agents SDK (``pip install "agentsessions[openai-agents]"``).
- `agentsessions.integrations.adk`: `AgentSessionsSessionService`, a session service for
  Google's Agent Development Kit (``pip install "agentsessions[adk]"``).
- `agentsessions.integrations.langgraph`: `AgentSessionsSaver`, a checkpointer for
  LangGraph (``pip install "agentsessions[langgraph]"``).
"""

__all__: list[str] = []
