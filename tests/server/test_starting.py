"""How `llmsim serve` starts requests (llmsim.server.starting): a batch a loop step after it was read,
each at once until it first waits, then in a task that behaves as if it had run from the start."""
from __future__ import annotations

import asyncio
import contextvars

import pytest

from llmsim.server.starting import Starter, start_eagerly

REQUEST = contextvars.ContextVar("request", default=None)


async def test_a_request_that_never_waits_is_done_before_its_batch_returns_and_leaves_no_task():
    done, tasks = [], set()

    async def answer(name):
        done.append(name)
    start_eagerly(asyncio.get_running_loop(), answer("a"), tasks)
    assert done == ["a"] and not tasks


async def test_a_request_that_waits_goes_on_in_a_task_held_until_it_ends():
    tasks = set()
    gate = asyncio.get_running_loop().create_future()

    async def answer():
        return await gate
    start_eagerly(asyncio.get_running_loop(), answer(), tasks)
    (task,) = tasks
    gate.set_result("answered")
    assert await task == "answered"
    await asyncio.sleep(0)
    assert not tasks


async def test_each_request_keeps_its_own_context_variables_across_its_waits():
    seen, tasks = {}, set()

    async def answer(name):
        REQUEST.set(name)
        await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        seen[name] = REQUEST.get()
    loop = asyncio.get_running_loop()
    for name in ("a", "b"):
        start_eagerly(loop, answer(name), tasks)
    await asyncio.gather(*tasks)
    assert seen == {"a": "a", "b": "b"}
    assert REQUEST.get() is None            # nothing leaked into the caller's context


async def test_cancelling_a_waiting_request_reaches_its_code():
    cleaned, tasks = [], set()

    async def answer():
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)
    start_eagerly(asyncio.get_running_loop(), answer(), tasks)
    (task,) = tasks
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]


async def test_an_error_after_a_wait_ends_the_task_with_it():
    tasks = set()

    async def answer():
        await asyncio.sleep(0)
        raise ValueError("broken")
    start_eagerly(asyncio.get_running_loop(), answer(), tasks)
    (task,) = tasks
    with pytest.raises(ValueError, match="broken"):
        await task


async def test_an_error_before_any_wait_goes_to_the_loops_exception_handler():
    loop = asyncio.get_running_loop()
    reported = []
    loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))
    try:
        async def answer():
            raise ValueError("broken")
        start_eagerly(loop, answer(), set())
    finally:
        loop.set_exception_handler(None)
    assert [str(e) for e in reported] == ["broken"]


async def test_a_batch_starts_after_the_reads_of_the_next_loop_step():
    """Requests read in one step start only after the callbacks queued behind them (the
    next read of sockets) ran: those requests are read, and stamped, first."""
    loop = asyncio.get_running_loop()
    order, tasks = [], set()

    async def answer(name):
        order.append(f"start {name}")
    starter = Starter(loop)
    starter.add(answer, "a", tasks, True)
    loop.call_soon(order.append, "next read")
    starter.add(answer, "b", tasks, False)
    for _ in range(4):
        await asyncio.sleep(0)
    assert order == ["next read", "start a", "start b"]
