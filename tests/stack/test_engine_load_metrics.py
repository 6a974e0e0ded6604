"""The engine signals the canary reads to tell busy from wedged (``sparkpair_health.engine_load``)
are the names vLLM 0.33 registers, and ``vllm:iteration_tokens_total`` is observed every engine
step, also one that outputs nothing (a chunk of a long prefill): its scheduler returns stats
every step (docs/reference/numerics.md, "Engine signals"). Served by the real 0.32 CPU server:
``tests/vllm_real/test_canary_soak.py``."""

from __future__ import annotations

import inspect

import pytest

pytestmark = pytest.mark.stack


def test_the_engine_signal_names_are_vllms() -> None:
    from sparkpair_health.engine_load import ENGINE_SAMPLES
    from vllm.v1.metrics import loggers

    src = inspect.getsource(loggers)
    for sample in ENGINE_SAMPLES.values():
        # a histogram's _count/_sum and a counter's _total are suffixes of the registered name
        base = sample.rsplit("_", 1)[0] if sample.endswith(("_count", "_sum", "_total")) else sample
        assert f'name="{base}"' in src, (sample, base)
    assert 'self._histogram_cls(\n            name="vllm:iteration_tokens_total"' in src


def test_the_scheduler_returns_its_stats_every_step_and_the_logger_observes_each() -> None:
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    upd = inspect.getsource(Scheduler.update_from_output)
    assert "We must return the stats even if there are no request" in upd
    assert "engine_core_outputs[0] = eco = EngineCoreOutputs()" in upd
    rec = inspect.getsource(PrometheusStatLogger)
    assert "self.histogram_iteration_tokens[engine_idx].observe(" in rec
