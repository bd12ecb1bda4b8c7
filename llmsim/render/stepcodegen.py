"""A template's stream steps compiled to generator functions: one yields `Event`s, one each
event's SSE frame with its due time, one `MarkedEvent`s (with the `Role` its step declares).

Nested steps become plain Python loops in one function; a loop's variables live in locals
and in one dict per loop, filled only where something reads it whole. Invariants: every value
an event needs is computed before it is yielded (no context outlives its event); the
expressions and writers called are those `templates.Compiler` checked; a template error is
logged with its path (llmsim.render.jsoncodegen `raise_failure`). The story:
docs/internals.md#renderstepcodegen; why it is kept: docs/performance.md#what-is-kept-for-speed.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

from llmsim.render import pyexpr, sse
from llmsim.render.jsoncodegen import loop_runs
from llmsim.render.reuse import counted
from llmsim.render.template_syntax import LOOP


def _fill(ctx: dict, names: tuple[str, ...], values: tuple) -> dict:
    """A loop's context with its current item's variables stored in it, for what reads the
    context whole in a loop that neither tests nor loops (a guarded function, an object named by value)."""
    ctx.update(zip(names, values))
    return ctx


def _controls(steps: list) -> bool:
    """Whether `steps` test or loop (which read their context whole every time they run)."""
    return any("if" in step or "for" in step for step in steps)


class Role:
    """What a stream step declares about its events: `delta` (it carries one output token: it
    counts toward a fault's `after_tokens`), `terminal` (it ends the answer: a cut stream stops
    before it) and `snapshot` (the key of its data that holds the response object, or None)."""
    __slots__ = ("delta", "terminal", "snapshot")

    def __init__(self, delta: bool = False, terminal: bool = False, snapshot: str | None = None):
        self.delta, self.terminal, self.snapshot = delta, terminal, snapshot

    def __repr__(self) -> str:
        return f"Role(delta={self.delta}, terminal={self.terminal}, snapshot={self.snapshot!r})"


NO_ROLE = Role()


def role_of(step: dict) -> Role | None:
    """The constant role a step declares, or None when `delta` or `terminal` is an expression."""
    delta, terminal = step.get("delta", False), step.get("terminal", False)
    if isinstance(delta, bool) and isinstance(terminal, bool):
        return Role(delta, terminal, step.get("snapshot"))
    return None


class _Role:
    """The code that works out a step's role (`_rl`), in the marked-events function only."""
    __slots__ = ("code",)

    def __init__(self, code: list[str]):
        self.code = code

    def lines(self, mode: str, event_class: type) -> list[str]:
        return self.code if mode == MARKED else []


class _Data:
    """A JSON step's data: `_json`, its bytes, in the events function; in the SSE function,
    when its writer's code is written in place, `_f`, the whole frame (head, JSON and end in
    one join)."""
    __slots__ = ("plain", "framed")

    def __init__(self, plain: list[str], framed: list[str] | None):
        self.plain, self.framed = plain, framed

    def lines(self, mode: str, event_class: type) -> list[str]:
        return self.framed if mode == FRAMES and self.framed is not None else self.plain


class _Yield:
    """Where a step emits its event: an `Event` in the events function, and in the SSE
    function a (due time, frame) pair whose frame head is a constant (llmsim.render.sse); `framed`:
    the frame `_f` is made already (`_Data`)."""
    __slots__ = ("pad", "name", "raw", "framed", "role")

    def __init__(self, pad: str, name: str | None, raw: str | None = None, framed: bool = False,
                 role: str = "_rl"):
        self.pad, self.name, self.raw, self.framed, self.role = pad, name, raw, framed, role

    def lines(self, mode: str, event_class: type) -> list[str]:
        pad, name = self.pad, self.name
        if self.raw is not None:
            if mode == FRAMES:
                return [f"{pad}yield _at, {sse.frame(event_class(name, self.raw, 0.0, True))!r}"]
            if mode == MARKED:
                return [f"{pad}_e = MarkedEvent({name!r}, {self.raw!r}, _at, True)",
                        f"{pad}_e.role = {self.role}", f"{pad}yield _e"]
            return [f"{pad}yield Event({name!r}, {self.raw!r}, _at, True)"]
        if mode == FRAMES and self.framed:
            return [f"{pad}yield _at, _f"]
        if mode == FRAMES:      # (a writer that gave no bytes: the frame of its Event, e.g. `null`)
            return [f"{pad}try:", f"{pad}    _f = {sse.head(name)!r} + _json + {sse.END!r}",
                    f"{pad}except TypeError:", f"{pad}    _f = _frame(Event({name!r}, None, _at, False, _json))",
                    f"{pad}yield _at, _f"]
        # Event(name, None, _at, False, _json) without a call to Event.__init__ (same slots)
        made = "MarkedEvent" if mode == MARKED else "Event"
        return [f"{pad}_e = _new({made})", f"{pad}_e.name = {name!r}", f"{pad}_e.at = _at",
                f"{pad}_e.raw = False", f"{pad}_e._data = None", f"{pad}_e._json = _json",
                *([f"{pad}_e.role = {self.role}"] if mode == MARKED else []), f"{pad}yield _e"]


EVENTS, FRAMES, MARKED = "events", "frames", "marked"


def _texts(line) -> list[str]:
    """The code text of one line of a stream function being made (a string, or one of the above)."""
    if isinstance(line, str):
        return [line]
    if isinstance(line, _Data):
        return [*line.plain, *(line.framed or ())]
    return getattr(line, "code", None) or []


class StepCodegen:
    def __init__(self, compiler, event_class: type, marked_class: type):
        self.compiler = compiler
        self.event_class = event_class
        # the JSON writers' namespace: their code is written into the stream functions
        self.namespace: dict[str, Any] = compiler.codegen.namespace
        self.namespace.update(Event=event_class, MarkedEvent=marked_class, _new=object.__new__,
                              _frame=sse.frame, _fill=_fill)
        self._ids = itertools.count()
        self._fills: dict[str, str] = {}    # a loop's context -> the code filling in its item

    def generator(self, steps: list, where: str) -> tuple[Callable[[dict, list], Iterator], ...]:
        """`steps` as three generator functions of (ctx, clock), where clock is [due time, next
        seq]: one yields each step's `Event`, one its SSE frame as (due time, bytes), and one
        its `MarkedEvent` (with the step's `Role`)."""
        lines: list = ["    _m = ctx['__memo']"]     # one render's memo (llmsim.render.jsoncodegen)
        self._block(steps, where, "ctx", 1, lines, (), {"__memo": "_m"})
        made = []
        for mode in (EVENTS, FRAMES, MARKED):
            name = f"_stream{next(self._ids)}"
            body = [part for line in lines for part in (
                line.lines(mode, self.event_class) if isinstance(line, (_Data, _Yield, _Role)) else (line,))]
            source = "\n".join([f"def {name}(ctx, clock):", "    _at, _seq = clock", *body,
                                "    return", "    yield", ""])
            exec(compile(source, f"<stream {where}>", "exec"), self.namespace)  # noqa: S102 - our own code
            made.append(self.namespace[name])
        return tuple(made)

    def _whole(self, ctx: str) -> str:
        """Code for the context `ctx` where it is used whole: a loop's, with its item's
        variables stored in it first (they are read from locals everywhere else)."""
        return self._fills.get(ctx, ctx)

    def _ref(self, f: Callable) -> str:
        name = f"_st{next(self._ids)}"
        self.namespace[name] = f
        return name

    def _block(self, steps: list, where: str, ctx: str, depth: int, lines: list,
               loops: tuple[frozenset[str], ...], held: dict[str, str]) -> None:
        """`loops`: the variables each enclosing loop binds, the innermost last; `held`: the
        variables (and memos) also held in locals, name -> local."""
        start = len(lines)
        for i, step in enumerate(steps):
            self._step(step, f"{where}[{i}]", ctx, depth, lines, loops, held)
        if len(lines) == start:
            lines.append("    " * depth + "pass")

    def _step(self, step: dict, where: str, ctx: str, depth: int, lines: list,
              loops: tuple[frozenset[str], ...], held: dict[str, str]) -> None:
        pad, compiler = "    " * depth, self.compiler
        if "for" in step:
            names, closure = compiler.loop(step["for"], f"{where}.for", unpacks=True)  # checks the spelling
            source = compiler.codegen.value_function("{{" + LOOP.match(step["for"]).group(2) + "}}",
                                                     f"{where}.for", reference=closure)
            inner, index = f"_x{next(self._ids)}", step.get("index")
            # each item is unpacked into locals (`_x1_name`), which the loop's events read, and
            # into the loop's context, which what is not written in place reads: at once when
            # the loop's steps test or loop, else only where the context is read whole (`_fill`)
            bound = {name: f"{inner}_{name}" for name in (*names, *([index] if index else []))}
            whole = self._whole(ctx)
            begins = len(lines)
            lines.append(f"{pad}{inner} = {{**{whole}}}")
            target = ", ".join(bound[name] for name in names)
            self._call("_items", source, ctx, pad, lines, held)     # (its code in place)
            if index:
                lines.append(f"{pad}for {bound[index]}, ({target}) in enumerate(_items):")
            else:
                lines.append(f"{pad}for {target} in _items:")
            if _controls(step.get("steps", [])):    # read whole in every run: stored at once
                lines += [f"{pad}    {inner}[{name!r}] = {local}" for name, local in bound.items()]
            else:
                self._fills[inner] = (f"_fill({inner}, {tuple(bound)!r}, "
                                      f"({''.join(local + ', ' for local in bound.values())}))")
            self._block(step.get("steps", []), f"{where}.steps", inner, depth + 1, lines,
                        (*loops, frozenset(bound)), {**held, **bound})
            # what its events compute once per run of the loop (jsoncodegen's `_lrN`), unset as it starts
            runs = loop_runs("\n".join(text for line in lines[begins:] for text in _texts(line)))
            lines[begins:begins] = [f"{pad}{local} = None" for local in runs]
            return
        if "if" in step:
            test = compiler.fast(step["if"], f"{where}.if")
            self._call("_test", test, ctx, pad, lines, held)       # (its code in place)
            lines.append(f"{pad}if _test:")
            self._block(step.get("steps", []), f"{where}.steps", ctx, depth + 1, lines, loops, held)
            if step.get("else"):
                lines.append(f"{pad}else:")
                self._block(step["else"], f"{where}.else", ctx, depth + 1, lines, loops, held)
            return
        if "at" in step:
            self._time(step["at"], f"{where}.at", ctx, pad, lines, held)
        name = step.get("event")
        role = self._role(step, where, ctx, pad, lines)
        if "raw" in step:
            lines.append(_Yield(pad, name, step["raw"], role=role))
            return
        compiler.value(step.get("data"), f"{where}.data")          # checks the value, names errors
        lines.append(f"{pad}{ctx}['seq'] = _seq")
        # what outer loops bound keeps its value while the innermost loop runs
        fixed = frozenset().union(*loops[:-1]) - loops[-1] - {"seq"} if loops else frozenset()
        writer = compiler.json_writer(step.get("data"), f"{where}.data", loop_fixed=fixed)
        given, plain = {**held, "seq": "_seq"}, []
        self._call("_json", writer, ctx, pad, plain, given)
        framed = self._framed(writer, name, ctx, pad, given)
        lines += [_Data(plain, framed), f"{pad}_seq += 1", _Yield(pad, name, framed=framed is not None, role=role)]

    def _role(self, step: dict, where: str, ctx: str, pad: str, lines: list) -> str:
        """Code for the step's `Role`: a constant, or (`delta` or `terminal` an expression) the
        code of `_rl`, one of the four roles its two tests pick, written into `lines`."""
        constant = role_of(step)
        if constant is not None:
            return self._ref(constant)
        tests = []
        for key in ("delta", "terminal"):
            value = step.get(key, False)
            tests.append(repr(value) if isinstance(value, bool)
                         else f"{self._ref(self.compiler.fast(value, f'{where}.{key}'))}({self._whole(ctx)})")
        roles = tuple(Role(delta, terminal, step.get("snapshot")) for delta in (False, True)
                      for terminal in (False, True))
        lines.append(_Role([f"{pad}_rl = {self._ref(roles)}[2 * bool({tests[0]}) + bool({tests[1]})]"]))
        return "_rl"

    def _framed(self, writer: Callable, name: str | None, ctx: str, pad: str,
                held: dict[str, str]) -> list[str] | None:
        """`_f = ` a JSON step's SSE frame, its writer's code in place with the frame's head
        and end joined in (a chat chunk: one join for the frame); None when the writer has
        no such code (it may omit its value, or was not generated)."""
        fast = getattr(writer, "fast", writer)
        framed = getattr(fast, "framed", None)
        if framed is None:
            return None
        whole = self._whole(ctx)
        *statements, value = framed(sse.head(name), sse.END, ctx, held, whole)
        value = counted(value, {"_seq"})        # (`seq` is the counter: a non-negative int)
        if fast is writer:      # unguarded (tests): it raises what the code raises
            return [f"{pad}{line}" for line in statements] + [f"{pad}_f = {value}"]
        on_error = f"_frame(Event({name!r}, None, _at, False, {self._ref(writer)}({whole})))"  # raises, naming the error
        return [f"{pad}try:", *(f"{pad}    {line}" for line in statements), f"{pad}    _f = {value}",
                f"{pad}except Exception:", f"{pad}    _f = {on_error}"]

    def _time(self, node: Any, where: str, ctx: str, pad: str, lines: list[str],
              held: dict[str, str]) -> None:
        """`_at = ` the step's time: read in place when it is a `{{ dotted.name }}`."""
        guarded = self.compiler.fast(node, where)
        inline = self.compiler.codegen.dotted_code(node)
        if inline is None:
            self._call("_at", guarded, ctx, pad, lines, held)
            return
        code, names = inline
        aliases = {f"_n_{name}": held[name] for name in names if held.get(name, "").isidentifier()}
        code = pyexpr.renamed(code, aliases) if aliases else code      # a loop's variable: its local
        reads = [f"_n_{name} = {held[name] if name in held else f'{ctx}[{name!r}]'}" for name in sorted(names)
                 if f"_n_{name}" not in aliases]
        lines += [f"{pad}try:", *(f"{pad}    {read}" for read in reads), f"{pad}    _at = {code}",
                  f"{pad}except Exception:", f"{pad}    _at = {self._ref(guarded)}({self._whole(ctx)})"]

    def _call(self, target: str, f: Callable, ctx: str, pad: str, lines: list[str],
              held: dict[str, str]) -> None:
        """`target = f(ctx)`: the generated code behind a guarded `f` called straight, and `f`
        itself (the value, or the template error logged and raised) only if that raises."""
        fast = getattr(f, "fast", f)        # (f itself: unguarded, or no generated code)
        inline, whole = getattr(fast, "inline", None), self._whole(ctx)
        if inline is None:
            if fast is f:
                lines.append(f"{pad}{target} = {self._ref(f)}({whole})")
            else:
                lines += [f"{pad}try:", f"{pad}    {target} = {self._ref(fast)}({whole})",
                          f"{pad}except Exception:", f"{pad}    {target} = {self._ref(f)}({whole})"]
            return
        # the generated code written in place, its variables read from the step's context
        *statements, value = inline(ctx, held, whole)
        value = counted(value, {"_seq"})        # (`seq` is the counter: a non-negative int)
        if fast is f:       # unguarded (tests): it raises what the code raises
            lines += [f"{pad}{line}" for line in statements] + [f"{pad}{target} = {value}"]
            return
        lines += [f"{pad}try:", *(f"{pad}    {line}" for line in statements),
                  f"{pad}    {target} = {value}",
                  f"{pad}except Exception:", f"{pad}    {target} = {self._ref(f)}({whole})"]
