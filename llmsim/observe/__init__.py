"""Observability: the observer of each exchange, stats and their views, metrics, access log, trace, dashboard.
May import pacing, sim, render, server (its GC figures) and the leaves; never api, state or faults.
"""
