"""The session of the levels that run the reference: a draft and its target, each read once, and what those levels
build on them once, when one first needs it: the compute (device and dtype, decided against the memory before a
tensor is read), the target's weights (their names; nothing read), the reference target, the loaded draft.

verify's forward, target and engine levels share one (``verify/run.py``); normalize's ``--aux-convention auto`` makes
its own on the draft and target it already read. Nothing here re-opens a checkpoint or re-detects, and torch is
imported only when a level asks for a value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from eagle_convert.errors import EagleConvertError, UsageError
from eagle_convert.reference.budget import MIN_POSITIONS, PROBE_STEPS
from eagle_convert.reference.compute import DEFAULT_DEVICE, DEFAULT_DTYPE

if TYPE_CHECKING:
    from eagle_convert.draft.detect import DraftSpec
    from eagle_convert.probe.run import LoadedDraft
    from eagle_convert.probe.target import Target
    from eagle_convert.read.checkpoint import Checkpoint
    from eagle_convert.read.config import TargetConfig
    from eagle_convert.reference.budget import ReferenceRun
    from eagle_convert.reference.compute import Compute
    from eagle_convert.reference.draft_reader import TensorReader
    from eagle_convert.reference.weights import SafetensorsWeights

LONG_RUN_FLOP = 1e13  # a probe above this (about 10 s at 1 TFLOP/s) hears its time estimate first


@dataclass
class Session:
    """A draft (opened and detected once) and its target's config (read once), with how the reference runs on them:
    ``device`` and ``dtype`` as asked (``--device``, ``--dtype``), the probe's text and size (``token_ids``,
    ``positions``, ``steps``) that the memory plan counts. ``served``: the engine level measures a running server
    (``--engine-url``), so a reference target that cannot run here only costs the probe's prediction (``no_probe``
    says why) instead of failing the run. ``notice`` hears the time a long probe will take, before it starts."""

    ckpt: Checkpoint
    spec: DraftSpec
    target: TargetConfig | None
    device: str = DEFAULT_DEVICE
    dtype: str = DEFAULT_DTYPE
    token_ids: list[list[int]] | None = None
    positions: int = MIN_POSITIONS
    steps: int = PROBE_STEPS
    served: bool = False
    notice: Callable[[str], None] | None = None
    compute: Compute | None = field(default=None, init=False)  # decided by plan_compute, before a tensor is read
    no_probe: str | None = field(default=None, init=False)  # why the probe does not run against the server
    draft: LoadedDraft | EagleConvertError | None = field(default=None, init=False)  # loaded once

    @cached_property
    def target_weights(self) -> SafetensorsWeights | None:
        return target_weights_of(self.target)

    @cached_property
    def reference(self) -> Target | EagleConvertError:
        """The reference target (transformers' model, weights streamed), or why it cannot be built."""
        from eagle_convert.probe.target import Target

        assert self.compute is not None and self.target is not None  # plan_compute decided it, for a target
        try:
            return Target.of(self.target, self.compute, self.target_weights)
        except EagleConvertError as exc:
            return exc

    def load_draft(self, reader: TensorReader | None = None) -> LoadedDraft | EagleConvertError:
        """The draft for the reference forward, loaded once (its tensors from ``reader`` when the tensors level kept
        them), or why the reference cannot run it."""
        from eagle_convert.probe.run import load_draft

        assert self.compute is not None  # plan_compute decided it
        if self.draft is None:
            try:
                self.draft = load_draft(self.ckpt, self.spec, self.compute, reader)
            except EagleConvertError as exc:
                self.draft = exc
        return self.draft

    def plan_compute(self, with_target: bool = True) -> None:
        """Where and in what dtype the reference runs, sized from the headers and configs already read (the target's
        part only ``with_target``: the levels that run it), before a tensor is read; when ``served``, a reference
        target that cannot fit or read here only costs the probe's prediction."""
        from eagle_convert.reference import compute

        probed = self.target if with_target else None
        weights = self.target_weights
        if self.served and probed is not None and weights is None:
            probed, self.no_probe = None, "the target's weights are not here (config only)"
        if probed is not None and weights is not None:
            from eagle_convert.reference.formats import declared, readable

            try:  # the target is the user's input: a format or scale the reference cannot read is exit 2, up front
                readable(weights, declared(probed.raw, weights.directory), weights.directory)
            except EagleConvertError as exc:
                if not self.served:
                    raise
                probed, self.no_probe = None, f"the reference cannot read the target: {exc.message}"
        run = reference_run_of(self.spec, self.ckpt, probed, weights, self.token_ids, self.positions, self.steps)
        try:
            self.compute = compute.resolve(self.device, self.dtype, run)
        except UsageError as exc:
            if not self.served or probed is None:
                raise
            probed, self.no_probe = None, f"the reference target does not fit here: {exc.message}"
            run = reference_run_of(self.spec, self.ckpt, None, None, self.token_ids, self.positions, self.steps)
            self.compute = compute.resolve(self.device, self.dtype, run)
        if self.notice is not None and probed is not None:
            _time_notice(run, self.compute, self.notice)


def _time_notice(run: ReferenceRun, chosen: Compute, notice: Callable[[str], None]) -> None:
    """Tell ``notice`` how long the probe should take, when that is long enough to be worth a measured rate."""
    from eagle_convert.reference.budget import available_memory, time_estimate
    from eagle_convert.reference.compute import matmul_rate

    if sum(run.flops()) >= LONG_RUN_FLOP:
        memory = available_memory("cpu")
        host = memory.bytes  # the page cache the streamed weights are read through
        held = run.estimate(chosen.dtype_name, memory.plan("cpu")).total if chosen.device.type == "cpu" else 0
        notice(time_estimate(run, matmul_rate(chosen), None if host is None else host - held)[1])


def reference_run_of(
    spec: DraftSpec,
    ckpt: Checkpoint,
    target_cfg: TargetConfig | None,
    target_weights: SafetensorsWeights | None,
    token_ids: list[list[int]] | None,
    positions: int | None,
    steps: int,
) -> ReferenceRun:
    """What the reference will hold, sized from the headers and configs already read (the target's part only when
    it runs): what ``compute.resolve`` decides ``--dtype`` against."""
    from eagle_convert.reference.budget import reference_run

    target_tensors = None
    if target_cfg is not None and target_weights is not None:
        target_tensors = {n: target_weights.shape(n) or () for n in target_weights.names()}
    return reference_run(
        {name: info.shape for name, info in ckpt.tensors.items()},
        spec.vocab.draft_vocab_size or spec.vocab.vocab_size or 0,
        spec.num_aux_hidden_states,
        target_cfg.raw if target_cfg is not None else None,
        target_tensors,
        token_ids,
        **({"min_positions": positions} if positions is not None else {}),
        steps=steps,
    )


def target_weights_of(target_cfg: TargetConfig | None) -> SafetensorsWeights | None:
    """The target's weights (its shards' names, nothing read), when the target's folder has them."""
    if target_cfg is None or not target_cfg.has_weights:
        return None
    from eagle_convert.reference import fp8
    from eagle_convert.reference.weights import SafetensorsWeights

    # The target is the user's input: a broken weight file or quantization block is an input error (exit 2) here,
    # before any tensor is read, never a finding against the draft.
    quant = target_cfg.quantization_config
    block = fp8.block_size(quant) if quant and quant.get("quant_method") == "fp8" else None
    return SafetensorsWeights(target_cfg.directory, block)
