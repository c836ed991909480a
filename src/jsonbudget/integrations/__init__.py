"""Turn budgets wired into agent frameworks, one module each; each needs its framework.

- ``jsonbudget.integrations.openai_agents``: `TurnBudgetHooks`, `budget_tools`;
- ``jsonbudget.integrations.pydantic_ai``: `TurnBudgetCapability`;
- ``jsonbudget.integrations.langchain``: `TurnBudgetCallback`, `budget_tool`.

``import jsonbudget`` imports none of them, and none of the frameworks.
"""
