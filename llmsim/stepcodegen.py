"""A template's stream steps compiled to one generator function.

Steps nest: a Responses stream loops over output items, picks the steps for the item's kind,
and loops over the item's tokens to emit one delta each. Run as nested generators, every
event would climb back through each level and copy the loop variables into a new dict. As
one generated function they are plain Python loops, e.g. (roughly)

    def _s0(ctx, clock):
        _at, _seq = clock
        ctx['seq'] = _seq
        _seq += 1
        yield Event('response.created', None, _at, False, _c0(ctx))
        _x1 = {**ctx}
        for _x1['item'] in _c1(ctx):
            if _c2(_x1):
                ...

A loop's variables live in one dict per loop, made when the loop starts and updated for each
item: every value an event needs (its JSON, its time) is computed before the event is yielded,
so nothing keeps a context past its event. That dict also holds the loop's own memo
(`__loop_memo`, new each time the loop starts), where an event's writer keeps the JSON of what
it reads of outer loops (llmsim.jsoncodegen: `loop_fixed`). The expressions, tests and JSON
writers called are the ones `templates.Compiler` checked and compiled (generated code backed
by closures); an event's time and JSON call the generated code straight, in a `try` whose
`except` calls the guarded function (the same value, or the precise template error). A time
that is a plain `{{ dotted.name }}` (each token's `at`) is read in place, and an event's five
slots are set in place too: two Python calls fewer for every event (~2% of a 32-token stream's
CPU).
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

from llmsim.jsoncodegen import LOOP_MEMO
from llmsim.template_syntax import LOOP


class StepCodegen:
    def __init__(self, compiler, event_class: type):
        self.compiler = compiler
        self.namespace: dict[str, Any] = {"Event": event_class, "_new": object.__new__}
        self._ids = itertools.count()

    def generator(self, steps: list, where: str) -> Callable[[dict, list], Iterator]:
        """`steps` as a generator function of (ctx, clock): clock is [due time, next seq]."""
        lines: list[str] = []
        self._block(steps, where, "ctx", 1, lines, ())
        name = f"_s{next(self._ids)}"
        source = "\n".join([f"def {name}(ctx, clock):", "    _at, _seq = clock", *lines,
                            "    return", "    yield", ""])
        exec(compile(source, f"<stream {where}>", "exec"), self.namespace)  # noqa: S102 - our own code
        return self.namespace[name]

    def _ref(self, f: Callable) -> str:
        name = f"_c{next(self._ids)}"
        self.namespace[name] = f
        return name

    def _block(self, steps: list, where: str, ctx: str, depth: int, lines: list[str],
               loops: tuple[frozenset[str], ...]) -> None:
        """`loops`: the variables each enclosing loop binds, the innermost last."""
        start = len(lines)
        for i, step in enumerate(steps):
            self._step(step, f"{where}[{i}]", ctx, depth, lines, loops)
        if len(lines) == start:
            lines.append("    " * depth + "pass")

    def _step(self, step: dict, where: str, ctx: str, depth: int, lines: list[str],
              loops: tuple[frozenset[str], ...]) -> None:
        pad, compiler = "    " * depth, self.compiler
        if "for" in step:
            var, closure = compiler.loop(step["for"], f"{where}.for")       # checks the spelling
            source = compiler.codegen.value_function("{{" + LOOP.match(step["for"]).group(2) + "}}",
                                                     f"{where}.for", fallback=closure)
            inner, index = f"_x{next(self._ids)}", step.get("index")
            lines.append(f"{pad}{inner} = {{**{ctx}, {LOOP_MEMO!r}: {{}}}}")
            if index:
                lines.append(f"{pad}for _i, {inner}[{var!r}] in enumerate({self._ref(source)}({ctx})):")
                lines.append(f"{pad}    {inner}[{index!r}] = _i")
            else:
                lines.append(f"{pad}for {inner}[{var!r}] in {self._ref(source)}({ctx}):")
            names = frozenset({var, index} if index else {var})
            self._block(step.get("steps", []), f"{where}.steps", inner, depth + 1, lines, (*loops, names))
            return
        if "if" in step:
            test = compiler.fast(step["if"], f"{where}.if")
            lines.append(f"{pad}if {self._ref(test)}({ctx}):")
            self._block(step.get("steps", []), f"{where}.steps", ctx, depth + 1, lines, loops)
            if step.get("else"):
                lines.append(f"{pad}else:")
                self._block(step["else"], f"{where}.else", ctx, depth + 1, lines, loops)
            return
        if "at" in step:
            self._time(step["at"], f"{where}.at", ctx, pad, lines)
        name = step.get("event")
        if "raw" in step:
            lines.append(f"{pad}yield Event({name!r}, {step['raw']!r}, _at, True)")
            return
        compiler.value(step.get("data"), f"{where}.data")          # checks the value, names errors
        lines += [f"{pad}{ctx}['seq'] = _seq", f"{pad}_seq += 1"]
        # what outer loops bound keeps its value while the innermost loop runs
        fixed = frozenset().union(*loops[:-1]) - loops[-1] - {"seq"} if loops else frozenset()
        writer = compiler.json_writer(step.get("data"), f"{where}.data", loop_fixed=fixed)
        self._call("_json", writer, ctx, pad, lines)
        # Event(name, None, _at, False, _json) without a call to Event.__init__ (same slots)
        lines += [f"{pad}_e = _new(Event)", f"{pad}_e.name = {name!r}", f"{pad}_e.at = _at",
                  f"{pad}_e.raw = False", f"{pad}_e._data = None", f"{pad}_e._json = _json", f"{pad}yield _e"]

    def _time(self, node: Any, where: str, ctx: str, pad: str, lines: list[str]) -> None:
        """`_at = ` the step's time: read in place when it is a `{{ dotted.name }}`."""
        guarded = self.compiler.fast(node, where)
        inline = self.compiler.codegen.dotted_code(node)
        if inline is None:
            self._call("_at", guarded, ctx, pad, lines)
            return
        code, names = inline
        lines += [f"{pad}try:", *(f"{pad}    _n_{name} = {ctx}[{name!r}]" for name in sorted(names)),
                  f"{pad}    _at = {code}", f"{pad}except Exception:", f"{pad}    _at = {self._ref(guarded)}({ctx})"]

    def _call(self, target: str, f: Callable, ctx: str, pad: str, lines: list[str]) -> None:
        """`target = f(ctx)`: the generated code behind a guarded `f` called straight, and `f`
        itself (its fallback: the value, or the precise template error) only if that raises."""
        fast = getattr(f, "fast", None)
        if fast is None:
            lines.append(f"{pad}{target} = {self._ref(f)}({ctx})")
            return
        lines += [f"{pad}try:", f"{pad}    {target} = {self._ref(fast)}({ctx})",
                  f"{pad}except Exception:", f"{pad}    {target} = {self._ref(f)}({ctx})"]
