"""Serve-path candidates and the choice among them (pure: no torch, no vLLM).

A *serve path* is one place on DeepSeek-V4's serve path where vLLM 0.33 calls DeepGEMM on
family 120 (``docs/reference/deepgemm-sm120.md``). Each path has candidates: DeepGEMM and the
other backends vLLM 0.33 offers for the same computation. A :class:`Candidate` is small: its
path, its name, how to tell whether this install offers it (``discover``), how to run it at
one shape (``run``), and the vLLM switch that selects it (:class:`Switch`).

The choice follows the evidence rule the overlay uses for o_proj (:func:`plan.decide_o_proj`):
a candidate qualifies only if the probe ran it at every probed shape of its path and every
run matched the fp64 reference; among those :func:`sparkpair_overlay.decision.pick_stable` picks (the
fastest, unless the previous probe's choice or the first in registry order is within
:data:`~sparkpair_overlay.decision.DECISION_MARGIN` of it). DeepGEMM is never chosen without a probe
that shows it correct on this device. A path with no qualifying candidate stops the node with a
verdict naming the path, each candidate's error and the documented way around it, unless
``SPARKPAIR_SERVE_PATHS`` forces a candidate for that path.

The choices are made together where one changes another's operands: the switches of the chosen
candidates must make a ``wo_a`` the matrix serves (:func:`sparkpair_overlay.serve_matrix.linear_outcome`),
a path needed only with another path's candidate (``wo_a-scale`` exists only with DeepGEMM's linear
kernel) is not needed otherwise, and :func:`choose_with_o_proj` picks the linear backend and the
o_proj backend as one (the o_proj rows are taken on the ``wo_a`` layout each linear backend makes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..decision import pick_stable
from ..serve_matrix import Switches, linear_outcome

#: Schema of the ``serve_paths`` section of the probe JSON (inside ``sparkpair-probe/2``).
SERVE_SCHEMA = "sparkpair-serve-paths/1"


class ServePathError(ValueError):
    """A malformed serve-path input (override string, probe JSON section)."""


@dataclass(frozen=True)
class Switch:
    """How vLLM 0.33 is told to use a candidate.

    Attributes:
        env: environment variables the node sets for vLLM (``VLLM_USE_DEEP_GEMM=0``).
        args: ``vllm serve`` arguments the node adds (``--moe-backend marlin``).
        needs_env: environment values the candidate needs left as they are (a DeepGEMM
            candidate needs ``VLLM_USE_DEEP_GEMM=1``); a choice elsewhere that sets another
            value excludes this candidate.
    """

    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    needs_env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        """``VLLM_USE_DEEP_GEMM=0 --moe-backend marlin`` or ``(vLLM's default)``."""
        parts = [f"{k}={v}" for k, v in self.env] + list(self.args)
        return " ".join(parts) if parts else "(vLLM's default)"

    def to_json(self) -> dict[str, Any]:
        return {"env": dict(self.env), "args": list(self.args), "needs_env": dict(self.needs_env)}


@dataclass(frozen=True)
class Shape:
    """One probed shape of a path.

    Attributes:
        label: ``decode`` | ``decode-batch`` | ``prefill`` plus the layer (``wo_b decode``).
        tokens: token count T (rows of the activation).
        dims: the other sizes the runner needs (``{"n": 4096, "k": 4096}``).
    """

    label: str
    tokens: int
    dims: tuple[tuple[str, int], ...] = ()

    def dim(self, name: str) -> int:
        return dict(self.dims)[name]


@dataclass(frozen=True)
class Trial:
    """What a candidate's ``run`` hands back for one shape: a call to time and the check.

    Attributes:
        call: runs the candidate once (the timed unit; CUDA-graph capturable on a GPU).
        check: compares the output of the last ``call()`` against the fp64 reference and
            returns the path's error metric (relative Frobenius error unless the path says
            otherwise); NaN/inf in the output must give ``inf``.
    """

    call: Callable[[], Any]
    check: Callable[[], float]


@dataclass(frozen=True)
class Candidate:
    """One backend for one serve path.

    Attributes:
        path: the serve path's name (``moe-mxfp4``).
        name: the candidate's name (``deep_gemm``, ``marlin``).
        discover: ``() -> None`` when this install offers the candidate, else why not (a
            sentence). Runs anywhere (no GPU): it asks the installed vLLM/DeepGEMM.
        run: ``(shape) -> Trial`` on the device; raises when the candidate cannot run there.
        switch: the vLLM switch that selects it.
        uses_deepgemm: the candidate runs DeepGEMM code.
    """

    path: str
    name: str
    discover: Callable[[], str | None]
    run: Callable[[Shape], Trial]
    switch: Switch = Switch()
    uses_deepgemm: bool = False


@dataclass(frozen=True)
class ServePath:
    """A serve path: what it computes, where it is probed, its tolerance, its candidates.

    Attributes:
        name: ``linear-fp8-block`` | ``moe-mxfp4`` | ``mhc-prenorm`` | ``indexer-mqa-logits`` |
            ``wo_a-scale``.
        what: one line: the computation and the vLLM code that runs it.
        shapes: the probed shapes (DeepSeek-V4-Flash at the profile's TP).
        tol: largest accepted error (the metric of the candidates' ``check``).
        workaround: the documented way around a path with no correct candidate.
        candidates: in vLLM's own preference order.
        needed_with: ``(path, candidate)``: this path runs only when that path chose that candidate
            (``wo_a-scale`` only with ``linear-fp8-block=deep_gemm``); ``None``: always.
    """

    name: str
    what: str
    shapes: tuple[Shape, ...]
    tol: float
    workaround: str
    candidates: tuple[Candidate, ...] = ()
    needed_with: tuple[str, str] | None = None


@dataclass(frozen=True)
class ServeRow:
    """One measurement: a candidate at a shape.

    Attributes:
        path, candidate: names.
        shape: the shape's label; tokens: T.
        ok: ran, finite, and ``err <= tol``.
        us: median µs per call (``None`` when it did not run or could not be timed).
        err: the metric (``None`` when it did not run).
        error: why not ok (``"Type: message"``, or ``unavailable: ...``), else ``None``.
    """

    path: str
    candidate: str
    shape: str
    tokens: int
    ok: bool
    us: float | None = None
    err: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "candidate": self.candidate,
            "shape": self.shape,
            "tokens": self.tokens,
            "ok": self.ok,
            "us": self.us,
            "err": self.err,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, r: Mapping[str, Any]) -> ServeRow:
        return cls(
            str(r["path"]),
            str(r["candidate"]),
            str(r["shape"]),
            int(r["tokens"]),
            bool(r["ok"]),
            None if r.get("us") is None else float(r["us"]),
            None if r.get("err") is None else float(r["err"]),
            None if r.get("error") is None else str(r["error"]),
        )


@dataclass(frozen=True)
class PathChoice:
    """The decision for one path.

    Attributes:
        path: its name.
        candidate: the chosen candidate's name, or ``None`` (no correct candidate: stop).
        switch: the chosen candidate's switch (empty when none).
        reason: why, in words.
        evidence: one line per candidate: correct and total µs, or its first error.
        forced: chosen by ``SPARKPAIR_SERVE_PATHS``, not by evidence.
        needed: False when the path does not run with the other choices (its ``needed_with``
            candidate was not chosen); then ``candidate`` is ``None`` and nothing stops.
    """

    path: str
    candidate: str | None
    switch: Switch
    reason: str
    evidence: tuple[str, ...] = ()
    forced: bool = False
    needed: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "candidate": self.candidate,
            "switch": self.switch.to_json(),
            "reason": self.reason,
            "evidence": list(self.evidence),
            "forced": self.forced,
            "needed": self.needed,
        }


@dataclass(frozen=True)
class ServeChoice:
    """All paths' decisions, the switches to pass to vLLM, and the stop verdict if any.

    Attributes:
        choices: one per path, in registry order.
        env: environment the node sets for vLLM (union of the chosen switches).
        args: ``vllm serve`` arguments the node adds.
        verdict: ``None`` when every path has a candidate; else the text that stops the node.
    """

    choices: tuple[PathChoice, ...]
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    verdict: str | None = None

    @property
    def stop(self) -> bool:
        return self.verdict is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SERVE_SCHEMA,
            "choices": [c.to_json() for c in self.choices],
            "env": dict(self.env),
            "args": list(self.args),
            "verdict": self.verdict,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServeChoice:
        """Parse the ``serve_choice`` section of the probe JSON.

        Raises:
            ServePathError: wrong schema tag or a malformed field.
        """
        if data.get("schema") != SERVE_SCHEMA:
            raise ServePathError(f"serve_choice.schema={data.get('schema')!r}; wanted {SERVE_SCHEMA!r}")
        try:
            choices = tuple(
                PathChoice(
                    str(c["path"]),
                    c["candidate"],
                    Switch(
                        tuple(c["switch"]["env"].items()),
                        tuple(c["switch"]["args"]),
                        tuple(c["switch"].get("needs_env", {}).items()),
                    ),
                    str(c["reason"]),
                    tuple(c["evidence"]),
                    bool(c["forced"]),
                    bool(c.get("needed", True)),
                )
                for c in data["choices"]
            )
            return cls(
                choices,
                tuple((str(k), str(v)) for k, v in data["env"].items()),
                tuple(str(a) for a in data["args"]),
                data["verdict"],
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ServePathError(f"serve_choice: malformed ({type(exc).__name__}: {exc})") from None


def parse_overrides(value: str, paths: Sequence[ServePath]) -> dict[str, str]:
    """Parse ``SPARKPAIR_SERVE_PATHS`` (``path=candidate,path=candidate``; empty = none).

    Raises:
        ServePathError: an item is not ``path=candidate``, or names an unknown path or
            candidate; the message lists the known ones.
    """
    known = {p.name: [c.name for c in p.candidates] for p in paths}
    out: dict[str, str] = {}
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        path, sep, cand = item.partition("=")
        path, cand = path.strip(), cand.strip()
        if not sep or path not in known or cand not in known[path]:
            wanted = "; ".join(f"{p}={'|'.join(c)}" for p, c in known.items())
            raise ServePathError(
                f"SPARKPAIR_SERVE_PATHS item {item[:64]!r}{'...' if len(item) > 64 else ''}; "
                f"wanted path=candidate among: {wanted}"
            )
        out[path] = cand
    return out


def _summary(rows: Sequence[ServeRow], n_shapes: int) -> tuple[bool, float, str]:
    """``(qualifies, total_us, evidence text)`` of one candidate's rows."""
    bad = [r for r in rows if not r.ok]
    if bad:
        r = bad[0]
        return (
            False,
            float("inf"),
            f"{r.error or f'err {r.err:.3g} over tolerance'} (at {r.shape}, T={r.tokens})",
        )
    if len(rows) < n_shapes:
        return False, float("inf"), f"probed at {len(rows)} of {n_shapes} shapes"
    timed = [r.us for r in rows if r.us is not None]
    total = sum(timed) if len(timed) == len(rows) else float("inf")
    worst = max((r.err or 0.0) for r in rows)
    t = f"{total:.1f} µs total" if total != float("inf") else "untimed"
    return True, total, f"correct at all {len(rows)} shapes (max err {worst:.2e}), {t}"


def candidate_total(path: ServePath, rows: Sequence[ServeRow], name: str) -> float | None:
    """The summed µs of a candidate that qualifies on ``path`` (correct, timed everywhere), else ``None``."""
    mine = [r for r in rows if r.path == path.name and r.candidate == name]
    ok, total, _ = _summary(mine, len(path.shapes))
    return total if ok and total != float("inf") else None


def served_switches_of(env: Mapping[str, str], args: Sequence[str], base: Switches | None = None) -> Switches:
    """The :class:`~sparkpair_overlay.serve_matrix.Switches` a set of chosen switches gives vLLM (on top of
    ``base``: the probe's own environment)."""
    b = base or Switches()
    pairs = dict(zip(args[::2], args[1::2], strict=False))

    def flag(name: str, default: bool) -> bool:
        v = env.get(name)
        return default if v is None else bool(int(v))

    return replace(b, linear_backend=pairs.get("--linear-backend", b.linear_backend),
                   use_deep_gemm=flag("VLLM_USE_DEEP_GEMM", b.use_deep_gemm),
                   use_deep_gemm_e8m0=flag("VLLM_USE_DEEP_GEMM_E8M0", b.use_deep_gemm_e8m0))


def _qualifies(p: ServePath, rows: Sequence[ServeRow], name: str, excluded: set[tuple[str, str]]) -> bool:
    return (p.name, name) not in excluded and _summary(
        [r for r in rows if r.path == p.name and r.candidate == name], len(p.shapes))[0]


def choose(
    paths: Sequence[ServePath],
    rows: Sequence[ServeRow],
    overrides: Mapping[str, str] | None = None,
    *,
    previous: Mapping[str, str] | None = None,
    fixed: Mapping[str, tuple[str, str]] | None = None,
    base: Switches | None = None,
) -> ServeChoice:
    """Pick each path's candidate and merge the switches (pure).

    Args:
        paths: the registry (names, shapes, candidates and their switches).
        rows: the probe's measurements.
        overrides: ``{path: candidate}`` from ``SPARKPAIR_SERVE_PATHS``.
        previous: ``{path: candidate}`` the previous probe chose (kept within the margin).
        fixed: ``{path: (candidate, reason)}`` decided together with another path
            (:func:`choose_with_o_proj`); the candidate must qualify.
        base: the switches of the environment the probe ran in (the matrix check starts from them).

    Returns:
        A :class:`ServeChoice`. Conflicts are settled until the switches agree: a chosen candidate
        that sets an environment value another chosen candidate needs otherwise drops the needing one
        when its path has another correct candidate, else drops the setter
        (``VLLM_USE_DEEP_GEMM=0`` turns DeepGEMM off for linears, MoE and mHC at once); switches under
        which vLLM 0.33 leaves no servable ``wo_a`` (:func:`sparkpair_overlay.serve_matrix.linear_outcome`)
        drop the candidate that set them; a linear backend whose ``needed_with`` path has no correct
        candidate is dropped; a path whose ``needed_with`` candidate was not chosen is marked not needed.
    """
    overrides = dict(overrides or {})
    excluded: dict[tuple[str, str], str] = {}
    by_name = {p.name: p for p in paths}
    cand_of = {(p.name, c.name): c for p in paths for c in p.candidates}
    choices: list[PathChoice] = []
    for _ in range(len(paths) * 6 + 1):
        choices = [_choose_one(p, rows, overrides.get(p.name), excluded, (previous or {}).get(p.name),
                               (fixed or {}).get(p.name)) for p in paths]
        chosen = {ch.path: ch.candidate for ch in choices}
        env: dict[str, str] = {}
        for ch in choices:
            env.update(dict(ch.switch.env))
        args = [a for ch in choices for a in ch.switch.args]
        new: dict[tuple[str, str], str] = {}
        # 1. a chosen candidate needs an environment value another chosen one sets otherwise
        for ch in choices:
            if ch.candidate is None or ch.forced:
                continue
            for k, v in cand_of[(ch.path, ch.candidate)].switch.needs_env:
                if env.get(k, v) == v:
                    continue
                setter = next(o for o in choices
                              if o.candidate is not None and dict(o.switch.env).get(k) not in (None, v))
                others = [c.name for c in by_name[ch.path].candidates if c.name != ch.candidate
                          and _qualifies(by_name[ch.path], rows, c.name, set(excluded))
                          and all(env.get(kk, vv) == vv for kk, vv in c.switch.needs_env)]
                if others or setter.forced:
                    new[(ch.path, ch.candidate)] = (f"excluded: {setter.path}={setter.candidate} sets {k}="
                                                    f"{env[k]}, which it needs at {v}")
                else:
                    new[(setter.path, str(setter.candidate))] = (
                        f"excluded: it sets {k}={env[k]}, which leaves {ch.path} without a correct candidate")
        # 2. the switches must leave a wo_a the matrix serves
        if not new:
            refusal = linear_outcome(served_switches_of(env, args, base)).refusal
            if refusal is not None:
                for ch in choices:
                    sets = {k for k, _ in ch.switch.env} | set(ch.switch.args[::2])
                    touches = sets & {"VLLM_USE_DEEP_GEMM", "--linear-backend"}
                    if ch.candidate is not None and not ch.forced and touches:
                        new[(ch.path, ch.candidate)] = f"excluded: {refusal}"
        # 3. a candidate whose needed path has no correct candidate
        if not new:
            for p in paths:
                if p.needed_with is None:
                    continue
                other, want = p.needed_with
                mine = next(c for c in choices if c.path == p.name)
                if chosen.get(other) == want and mine.candidate is None and not any(
                        c.forced for c in choices if c.path == other):
                    new[(other, want)] = f"excluded: it needs {p.name}, which has no correct candidate"
        if not new:
            break
        excluded.update(new)
    final = []
    for ch in choices:
        p = by_name[ch.path]
        if p.needed_with is not None and dict((c.path, c.candidate) for c in choices).get(p.needed_with[0]) \
                != p.needed_with[1]:
            final.append(replace(ch, candidate=None, switch=Switch(), needed=False, reason=(
                f"not needed: {p.needed_with[0]} did not choose {p.needed_with[1]}")))
        else:
            final.append(ch)
    env = {}
    for ch in final:
        env.update(dict(ch.switch.env))
    args = [a for ch in final for a in ch.switch.args]
    stopped = [c for c in final if c.candidate is None and c.needed]
    verdict = None
    if stopped:
        verdict = "\n".join(
            f"serve path {c.path} ({by_name[c.path].what}) has no correct candidate on this device: "
            + "; ".join(c.evidence)
            + f". Way around: {by_name[c.path].workaround}"
            for c in stopped
        )
    return ServeChoice(tuple(final), tuple(sorted(env.items())), tuple(args), verdict)


def _choose_one(
    path: ServePath,
    rows: Sequence[ServeRow],
    forced: str | None,
    excluded: Mapping[tuple[str, str], str],
    previous: str | None = None,
    fixed: tuple[str, str] | None = None,
) -> PathChoice:
    evidence: list[str] = []
    scored: list[tuple[float, str]] = []
    for cand in path.candidates:
        mine = [r for r in rows if r.path == path.name and r.candidate == cand.name]
        ok, total, text = _summary(mine, len(path.shapes))
        if (path.name, cand.name) in excluded:
            ok, text = False, f"{text}; {excluded[(path.name, cand.name)]}"
        evidence.append(f"{cand.name}: {text}")
        if ok:
            scored.append((total, cand.name))
    if forced is not None:
        cand = next(c for c in path.candidates if c.name == forced)
        return PathChoice(
            path.name,
            cand.name,
            cand.switch,
            f"forced by SPARKPAIR_SERVE_PATHS={path.name}={forced} (probe evidence: "
            f"{evidence[path.candidates.index(cand)]})",
            tuple(evidence),
            True,
        )
    if not scored:
        return PathChoice(
            path.name, None, Switch(), "no candidate was correct at every probed shape", tuple(evidence)
        )
    names = [c.name for c in path.candidates]
    if fixed is not None and fixed[0] in {n for _, n in scored}:
        name, why = fixed
    else:
        name, why = pick_stable(scored, names, previous)
        why = f"probe: {why} of {len(scored)} correct candidate(s)"
    if len(scored) < len(path.candidates):
        why += f"; {len(path.candidates) - len(scored)} not correct or not available"
    best = path.candidates[names.index(name)]
    return PathChoice(path.name, best.name, best.switch, why, tuple(evidence))


LINEAR_PATH = "linear-fp8-block"


def rows_for_unavailable(path: ServePath, cand: Candidate, why: str) -> list[ServeRow]:
    """One failed row per shape for a candidate this install does not offer."""
    return [
        ServeRow(path.name, cand.name, s.label, s.tokens, False, error=f"unavailable: {why}")
        for s in path.shapes
    ]


@dataclass
class ProbeProgress:
    """What ``run_probe`` reports to its ``on_progress`` callback: a step's label, done/total."""

    label: str
    done: int
    total: int
    notes: list[str] = field(default_factory=list)


def launch_switches(
    choice: ServeChoice, profile_args: Sequence[str], base_env: Mapping[str, str]
) -> tuple[dict[str, str], list[str], list[str]]:
    """What the node's launch passes to vLLM for a serve-path choice (pure).

    Args:
        choice: the probe's :class:`ServeChoice` (must not be a stop).
        profile_args: the profile's ``server.args``.
        base_env: the environment the node starts vLLM with.

    Returns:
        ``(env, extra_args, notes)``: ``base_env`` with the chosen switches' variables set; the
        ``--flag value`` pairs to append to ``vllm serve``; and one note per switch the profile
        already sets (the profile's value is kept: an operator's explicit flag wins, and the
        note names both values).

    Raises:
        ServePathError: ``choice`` is a stop (it carries a verdict).
    """
    if choice.stop:
        raise ServePathError(f"serve-path choice is a stop: {choice.verdict}")
    env = {**base_env, **dict(choice.env)}
    extra: list[str] = []
    notes: list[str] = []
    args = list(choice.args)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        given = [profile_args[i + 1] for i, a in enumerate(profile_args[:-1]) if a == flag]
        given += [a.split("=", 1)[1] for a in profile_args if a.startswith(flag + "=")]
        if given:
            notes.append(f"profile sets {flag} {given[0]}; the probe's choice {flag} {value} is not applied")
        else:
            extra += [flag, value]
    return env, extra, notes
