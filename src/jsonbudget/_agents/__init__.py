"""The agent-loop wing: guards per tool, per result and per turn, spill files, token
budgets, the size-error classifier and log summaries. Built on the core, never below it.
"""
