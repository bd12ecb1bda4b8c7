"""`llmsim fleet FILE`: many simulated backends, each a process of its own, and a control address.

spec: the fleet file, checked; supervisor: binds, forks and steers the backends, serves the
control address; backend: one backend's process. The story: docs/fleet.md.
"""
