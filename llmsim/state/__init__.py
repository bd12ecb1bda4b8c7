"""What requests leave and continue from: response state, background responses, stores (memory, LMDB, SQLite, Redis).
May import observe, pacing, sim, render and the leaves; never api, faults or server.
"""
