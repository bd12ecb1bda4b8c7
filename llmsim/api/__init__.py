"""The API: front door, guard, body validation and fast lane, handlers (one per operationId group), WebSocket.
May import state, faults, observe, pacing, sim, render, server and the leaves; the Simulator only as a type.
"""
