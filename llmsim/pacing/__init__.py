"""Sending rendered events: JSON bodies, SSE chunks and WebSocket frames at their due times, one timer per process.
May import render, server (its connection hooks) and the leaves; nothing of api, state, faults, observe or sim.
"""
