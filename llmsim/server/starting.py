"""How `llmsim serve`'s protocol (llmsim.server.corking) starts the requests it reads.

Requests start in batches after the loop's next read of sockets (a burst is read, and
stamped, before any is handled), and each runs at once until it first waits, then goes on
in a task from where it stopped, in the same `contextvars` context (as Python 3.12's eager
tasks). Only requests the app says may run so (`app.eager(scope)`) do. One `Starter` per
event loop; why it is kept: docs/performance.md#what-is-kept-for-speed. The story: docs/internals.md#serverstarting.
"""
from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Callable, Coroutine

Start = tuple[Callable[[Any], Coroutine], Any, set, bool]  # run, its argument, the tasks to join, eagerly


class Starter:
    __slots__ = ("loop", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.waiting: list[Start] = []

    def add(self, run: Callable[[Any], Coroutine], arg: Any, tasks: set, eagerly: bool) -> None:
        """Start `run(arg)` after the loop's next read of sockets: `eagerly`, or as a task
        (for code that needs `asyncio.current_task()` from its start: anyio's, starlette's).
        A task joins `tasks` until done (uvicorn waits for those at shutdown)."""
        if not self.waiting:
            self.loop.call_soon(self._after_next_reads)
        self.waiting.append((run, arg, tasks, eagerly))

    def _after_next_reads(self) -> None:
        batch, self.waiting = self.waiting, []
        self.loop.call_soon(self._start, batch)

    def _start(self, batch: list[Start]) -> None:
        loop = self.loop
        for run, arg, tasks, eagerly in batch:
            if eagerly:
                start_eagerly(loop, run(arg), tasks)
            else:
                task = loop.create_task(run(arg))
                task.add_done_callback(tasks.discard)
                tasks.add(task)


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine, tasks: set) -> None:
    """Run `coro` now, in a copy of the current context, until it first waits; then in a
    task (added to `tasks` until done). Like a task, what it raises is reported to the loop's
    exception handler, not to the caller."""
    context = contextvars.copy_context()
    try:
        awaited = context.run(coro.send, None)
    except StopIteration:
        return
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        loop.call_exception_handler({"message": "Exception in a request", "exception": exc})
        return
    task = loop.create_task(_Rest(coro, awaited), context=context)
    task.add_done_callback(tasks.discard)
    tasks.add(task)


class _Rest(Coroutine):
    """What is left of a coroutine that ran until it waited on `awaited` (a future, or None
    for one loop step), as a coroutine for a task to drive: its first step hands the task
    that wait; every later one, and any exception thrown in (a cancellation, even before
    the first step), goes to the coroutine where it stopped."""
    __slots__ = ("coro", "awaited", "started")

    def __init__(self, coro: Coroutine, awaited: Any):
        self.coro, self.awaited, self.started = coro, awaited, False

    def send(self, value: Any) -> Any:
        if not self.started:
            self.started = True
            awaited, self.awaited = self.awaited, None
            return awaited
        return self.coro.send(value)

    def throw(self, exc, *args) -> Any:
        self.started = True
        self.awaited = None
        return self.coro.throw(exc, *args)

    def close(self) -> None:
        self.coro.close()

    def __await__(self):
        raise TypeError("driven by its task only")

    @property
    def __name__(self) -> str:          # what the task's repr names
        return getattr(self.coro, "__qualname__", "request")
