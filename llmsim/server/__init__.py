"""The tuned server: uvicorn protocol and request cycle, eager start, accept loop, sockets, CPU pinning, GC policy,
and a server loop that sleeps while idle (quiet).
The only place touching uvicorn/connexion/starlette internals; imports only the leaves (errors, clock, ids, ...).
"""
