"""Simulated behaviour, pure: a request's plan (ids, text cut into tokens, reasoning, tool calls, usage, due times).
May import only the leaves (errors, ids, datafiles, settings, clock); never render, pacing, server or anything above.
"""
