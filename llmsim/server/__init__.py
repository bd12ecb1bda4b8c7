"""The tuned server: uvicorn protocol and request cycle, eager start, accept loop, sockets, CPU pinning, GC policy.
The only place touching uvicorn/connexion/starlette internals; imports only the leaves (errors, clock, ids, ...).
"""
