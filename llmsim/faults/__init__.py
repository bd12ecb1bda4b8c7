"""Fault injection: the catalogue of kinds and when one fires (catalogue), what it does to a plan or stream (injection).
May import observe, pacing, sim, render and the leaves; never api, state or server.
"""
