"""Serve-path candidates and the choice among them (pure: no torch, no vLLM).

A *serve path* is one place on DeepSeek-V4's serve path where vLLM 0.33 calls DeepGEMM on
family 120 (``docs/reference/deepgemm-sm120.md``). Each path has candidates: DeepGEMM and the
other backends vLLM 0.33 offers for the same computation. A :class:`Candidate` is small: its
path, its name, how to tell whether this install offers it (``discover``), how to run it at
one shape (``run``), and the vLLM switch that selects it (:class:`Switch`).

The choice follows the evidence rule the overlay uses for o_proj (:func:`plan.decide_o_proj`):
a candidate qualifies only if the probe ran it at every probed shape of its path and every
run matched the fp64 reference; among those the smallest summed time wins (ties: registry
order). DeepGEMM is never chosen without a probe that shows it correct on this device. A
path with no qualifying candidate stops the node with a verdict naming the path, each
candidate's error and the documented way around it, unless ``SPARKPAIR_SERVE_PATHS`` forces a
candidate for that path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Schema of the ``serve_paths`` section of the probe JSON (inside ``sparkpair-probe/1``).
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
    """

    name: str
    what: str
    shapes: tuple[Shape, ...]
    tol: float
    workaround: str
    candidates: tuple[Candidate, ...] = ()


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
    """

    path: str
    candidate: str | None
    switch: Switch
    reason: str
    evidence: tuple[str, ...] = ()
    forced: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "candidate": self.candidate,
            "switch": self.switch.to_json(),
            "reason": self.reason,
            "evidence": list(self.evidence),
            "forced": self.forced,
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


def choose(
    paths: Sequence[ServePath],
    rows: Sequence[ServeRow],
    overrides: Mapping[str, str] | None = None,
) -> ServeChoice:
    """Pick each path's fastest correct candidate and merge the switches (pure).

    Args:
        paths: the registry (names, shapes, candidates and their switches).
        rows: the probe's measurements.
        overrides: ``{path: candidate}`` from ``SPARKPAIR_SERVE_PATHS``.

    Returns:
        A :class:`ServeChoice`. When a chosen candidate sets an environment value another
        chosen candidate needs otherwise (``VLLM_USE_DEEP_GEMM=0`` turns DeepGEMM off for
        linears, MoE and mHC at once), the needing candidate is dropped and its path decided
        again, until the switches agree.
    """
    overrides = dict(overrides or {})
    excluded: set[tuple[str, str]] = set()
    for _ in range(len(paths) * 4 + 1):
        choices = [_choose_one(p, rows, overrides.get(p.name), excluded) for p in paths]
        cand_of = {(p.name, c.name): c for p in paths for c in p.candidates}
        env: dict[str, str] = {}
        for ch in choices:
            env.update(dict(ch.switch.env))
        clash = [
            (ch.path, ch.candidate)
            for ch in choices
            if ch.candidate is not None
            and not ch.forced
            and any(env.get(k, v) != v for k, v in cand_of[(ch.path, ch.candidate)].switch.needs_env)
        ]
        if not clash:
            break
        excluded.update(clash)
    args: list[str] = []
    for ch in choices:
        args += list(ch.switch.args)
    stopped = [c for c in choices if c.candidate is None]
    verdict = None
    if stopped:
        by_name = {p.name: p for p in paths}
        verdict = "\n".join(
            f"serve path {c.path} ({by_name[c.path].what}) has no correct candidate on this device: "
            + "; ".join(c.evidence)
            + f". Way around: {by_name[c.path].workaround}"
            for c in stopped
        )
    return ServeChoice(tuple(choices), tuple(sorted(env.items())), tuple(args), verdict)


def _choose_one(
    path: ServePath, rows: Sequence[ServeRow], forced: str | None, excluded: set[tuple[str, str]]
) -> PathChoice:
    evidence: list[str] = []
    scored: list[tuple[float, int, Candidate]] = []
    for i, cand in enumerate(path.candidates):
        mine = [r for r in rows if r.path == path.name and r.candidate == cand.name]
        ok, total, text = _summary(mine, len(path.shapes))
        if (path.name, cand.name) in excluded:
            ok, text = False, text + "; excluded: another path's choice switches off what it needs"
        evidence.append(f"{cand.name}: {text}")
        if ok:
            scored.append((total, i, cand))
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
    total, _, best = min(scored, key=lambda s: (s[0], s[1]))
    why = f"probe: fastest correct of {len(scored)} candidate(s)"
    if len(scored) < len(path.candidates):
        why += f"; {len(path.candidates) - len(scored)} not correct or not available"
    return PathChoice(path.name, best.name, best.switch, why, tuple(evidence))


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
