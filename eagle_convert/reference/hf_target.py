"""The target side of the reference: transformers' own model classes, their weights streamed from the target's own
safetensors files one module at a time.

The model is built on the meta device from the config as transformers reads it (``AutoConfig``), by the class
``AutoModelForCausalLM`` maps it to (or, for a multimodal target, ``AutoModelForImageTextToText``: the probe only
ever runs its text trunk, so the vision tower is never read); reference/hf_build.py says which config, class and
layers. Nothing of the checkpoint is copied: each *unit* (a decoder layer, or a module outside the layers that holds
parameters: the embedding, the final norm, the head) is read when its forward is about to run, through transformers'
own loading step (``convert_and_load_state_dict_in_model``: its renamings, its fusions of per-expert tensors, its
quantizers' dequantization), from a zero-copy mapping of the shards (reference/stream.py), and dropped when its
forward returns (its parameters become one-element placeholders on the compute device). While unit i runs, unit
i + 1 is read on a background thread. A target small enough to hold (``resident``) is read once and kept. A
mixture-of-experts layer is read without its routed experts: those run a group at a time inside its forward, only the
experts a token is routed to read (reference/experts.py).

Boundary ``j`` (0..N) is the input of decoder layer ``j``; boundary ``N`` is the last layer's output *before* the
final norm (what engines capture for EAGLE3). They are captured by hooks on the decoder layers, so the same holds for
every family (hybrid linear attention, Mamba, sliding windows, MLA, MoE) whatever transformers' own
``output_hidden_states`` does with the last entry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from eagle_convert.errors import InputError
from eagle_convert.reference import experts, formats
from eagle_convert.reference.decoding import Choices, Generated, check_boundaries, check_request
from eagle_convert.reference.hf_build import (
    decoder_layers,
    hf_config,
    is_head,
    meta_parameters,
    model_class,
    runs_on_text,
    text_config,
    trunk_weights,
)
from eagle_convert.reference.weights import WEIGHTS_HINT as _WEIGHTS_HINT
from eagle_convert.reference.weights import SafetensorsWeights


@dataclass(frozen=True)
class TargetOutput:
    """What one teacher-forced pass of the target returns (several sequences packed end to end)."""

    hidden: dict[int, torch.Tensor]  # boundary j -> [T, H] (j = input of layer j; j = N before the final norm)
    logits: torch.Tensor  # [T, V]
    final_hidden: torch.Tensor  # [T, H]: what the head reads (norm(boundary N))


@dataclass
class Unit:
    """Parameters read together: one decoder layer, or one module outside the layers."""

    name: str  # the module's path in the model
    params: list[str]  # the model's parameter names it owns
    keys: list[str]  # the checkpoint tensors they are read from
    loaded: bool = False
    pending: Future[None] | None = field(default=None, repr=False)


class StreamedModel:
    """transformers' model for the target on ``device`` and ``dtype``, its weights read from ``weights`` a unit at
    a time around each unit's forward (or once, when ``resident``)."""

    def __init__(
        self,
        directory: Path,
        raw: Mapping[str, Any],
        weights: SafetensorsWeights,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        resident: bool = False,
        experts_per_group: int | None = None,
    ) -> None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        self.directory = directory
        self.weights = trunk_weights(weights, raw)
        self.device = torch.device(device)
        self.dtype = dtype
        self.resident = resident
        self.config = hf_config(directory, raw)
        self.text = text_config(self.config)
        cls = model_class(self.config)
        quant = formats.declared(self.config, directory)
        self.quantizer = None if quant is None else formats.quantizer(self.config, quant, directory, self.device, dtype)
        self.weights = formats.readable(self.weights, quant, directory)  # every scale it needs, from the headers
        with meta_parameters():
            model = cls._from_config(self.config, dtype=dtype)
        if self.quantizer is not None:
            self.quantizer.preprocess_model(
                model=model, config=self.config, dtype=dtype, checkpoint_files=None, use_kernels=False
            )
        self.model = model.eval()
        self.model.requires_grad_(False)
        self.layers = decoder_layers(model, int(self.text.num_hidden_layers))
        self.num_layers = len(self.layers)
        self.hidden_size = int(self.text.hidden_size)
        self.vocab_size = int(self.text.vocab_size)
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.modeling_utils import LoadStateDictConfig

        self._load_config = LoadStateDictConfig(
            device_map={"": self.device},
            dtype=dtype,
            hf_quantizer=self.quantizer,
            weight_mapping=get_model_conversion_mapping(model, hf_quantizer=self.quantizer),  # type: ignore[arg-type]
        )
        self.units = self._units()
        if self._buffer_keys:
            from transformers.core_model_loading import convert_and_load_state_dict_in_model

            state = {key: self.weights.read(key) for key in self._buffer_keys}
            convert_and_load_state_dict_in_model(self.model, state, self._load_config)
        for name, param in list(model.named_parameters(remove_duplicate=False)):
            _set(model, name, _placeholder(param, self.device))
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="eagle-convert-read")
        self._lock = threading.Lock()
        self._hooks = [h for unit in self.units for h in self._hook(unit)]
        self.experts = [] if resident else self._stream_experts(experts_per_group)

    def _stream_experts(self, group: int | None) -> list[experts.StreamedExperts]:
        """The routed experts of every layer, taken out of their layer's unit and run ``group`` at a time
        (reference/experts.py); ``group`` None: as many as :data:`experts.GROUP_BYTES` holds."""
        names = {id(m): n for n, m in self.model.named_modules()}
        streams = []
        for module, _ in experts.streamable(self.layers):
            name = names[id(module)]
            unit = next(u for u in self.units if name.startswith(u.name + "."))
            mine = [k for k in unit.keys if self._renamed.get(k, "").startswith(name + ".")]
            keys = experts.split_keys(mine, self.weights, experts.count(module))
            if keys is None or not mine:
                continue  # read whole with its layer
            size = group or experts.group_for(
                keys, self.weights, experts.count(module), self.dtype.itemsize, experts.GROUP_BYTES
            )
            unit.keys = [k for k in unit.keys if k not in set(mine)]
            unit.params = [p for p in unit.params if not p.startswith(name + ".")]
            streams.append(
                experts.StreamedExperts(module, name, keys, size, self.weights, self.device, self._install, self._drop)
            )
        return streams

    def _install(self, state: dict[str, torch.Tensor], params: list[str], rows: int) -> None:
        """``state`` loaded into ``params`` sized to ``rows`` experts, through transformers' loading step."""
        from transformers.core_model_loading import convert_and_load_state_dict_in_model

        for name in params:
            value = self.model.get_parameter(name)
            _set(self.model, name, _placeholder(value, self.device, (rows, *value.shape[1:])))
        info, _ = convert_and_load_state_dict_in_model(self.model, state, self._load_config)
        self._check(info, params)

    def _drop(self, params: list[str]) -> None:
        """``params`` back to placeholders of their full shape (the model's own, from its config)."""
        for name in params:
            value = self.model.get_parameter(name)
            _set(self.model, name, _placeholder(value, self.device, self._shapes[name]))

    # ------------------------------------------------------------------------------------------------ the units

    def _units(self) -> list[Unit]:
        """The units in the order their forwards run: the modules before the layers, the layers, the rest."""
        from transformers.core_model_loading import rename_source_key

        model = self.model
        meta = model.state_dict()
        self._shapes = {name: tuple(value.shape) for name, value in meta.items()}
        self._renamed: dict[str, str] = {}  # checkpoint tensor -> the model's name for what it is read into
        mapping: list[Any] = list(self._load_config.weight_mapping or [])
        renamings = [m for m in mapping if type(m).__name__ != "WeightConverter"]
        converters = [m for m in mapping if type(m).__name__ == "WeightConverter"]
        layer_names = {id(layer): name for name, layer in model.named_modules() if any(layer is x for x in self.layers)}
        owners: dict[str, str] = {}  # parameter -> unit name
        for name, module in model.named_modules():
            if id(module) in layer_names:
                for p, _ in module.named_parameters():
                    owners[f"{name}.{p}"] = name
        for name, module in model.named_modules():
            for p, _ in module.named_parameters(recurse=False):
                owners.setdefault(f"{name}.{p}" if name else p, name)
        keys: dict[str, list[str]] = {}
        buffers = {name for name, _ in model.named_buffers()}
        self._buffer_keys: list[str] = []  # persistent buffers stored in the checkpoint (a router's bias): read once
        for key in self.weights.names():
            renamed, _ = rename_source_key(key, renamings, converters, model.base_model_prefix, meta)
            if renamed not in meta and key in meta:
                renamed = key
            self._renamed[key] = renamed
            unit = owners.get(renamed)
            if unit is not None:
                keys.setdefault(unit, []).append(key)
            elif renamed in buffers:
                self._buffer_keys.append(key)
        params: dict[str, list[str]] = {}
        for p, unit in owners.items():
            params.setdefault(unit, []).append(p)
        self._tied: dict[str, str] = {}  # a tied parameter -> the one whose tensors it reads (the head: embedding)
        for target, source in dict(getattr(model, "all_tied_weights_keys", None) or {}).items():
            unit, source_unit = owners.get(target), owners.get(source)
            if unit is not None and source_unit is not None and not keys.get(unit):
                keys[unit] = list(keys.get(source_unit, []))
                self._tied[target] = source
        order = {name: i for i, name in enumerate(n for n, _ in model.named_modules())}
        first_layer = order[layer_names[id(self.layers[0])]]
        layer_order = [layer_names[id(layer)] for layer in self.layers]

        def rank(name: str) -> tuple[int, int]:
            if name in layer_order:
                return (1, layer_order.index(name))
            return (0 if order[name] < first_layer and not is_head(name) else 2, order[name])

        units = [Unit(name, params[name], keys.get(name, [])) for name in params if runs_on_text(name)]
        return sorted(units, key=lambda u: rank(u.name))

    def _hook(self, unit: Unit) -> list[Any]:
        module = self.model.get_submodule(unit.name)
        index = self.units.index(unit)

        def before(_module: Any, _args: Any) -> None:
            self._ensure(unit)
            if not self.resident and index + 1 < len(self.units):
                self._read_ahead(self.units[index + 1])

        def after(_module: Any, _args: Any, _out: Any) -> None:
            if not self.resident:
                self._release(unit)

        return [module.register_forward_pre_hook(before), module.register_forward_hook(after)]

    def _read_ahead(self, unit: Unit) -> None:
        with self._lock:
            if not unit.loaded and unit.pending is None:
                unit.pending = self._reader.submit(self._load, unit)

    def _ensure(self, unit: Unit) -> None:
        with self._lock:
            pending = unit.pending
        if pending is not None:
            pending.result()
        elif not unit.loaded:
            self._load(unit)

    def _load(self, unit: Unit) -> None:
        from transformers.core_model_loading import convert_and_load_state_dict_in_model

        if unit.params and not unit.keys:
            raise InputError(
                f"the target's checkpoint has no tensors for {unit.name!r} ({', '.join(unit.params[:3])})",
                path=self.directory,
                hint=_WEIGHTS_HINT,
            )
        state = {key: self.weights.read(key) for key in unit.keys}
        info, _ = convert_and_load_state_dict_in_model(self.model, state, self._load_config)
        for target, source in self._tied.items():
            if target in unit.params:  # loaded as its source's tensor: the target takes it, the source goes back
                value = self.model.get_parameter(source)
                _set(self.model, target, value)
                info.missing_keys.discard(target)
                if not any(source in u.params and u.loaded for u in self.units):
                    _set(self.model, source, _placeholder(value, self.device))
        self._check(info, unit.params)
        with self._lock:
            unit.loaded, unit.pending = True, None

    def _check(self, info: Any, params: list[str]) -> None:
        """InputError for what loading ``params`` found wrong: a conversion that raised, a shape, a tensor missing."""
        if failed := sorted(info.conversion_errors):  # a conversion (e.g. a dequantization) that raised
            reason = str(info.conversion_errors[failed[0]]).strip().splitlines()[-2:]
            raise InputError(
                f"the target's tensors for {failed[0]!r} could not be read: {' '.join(reason)}",
                path=self.directory,
                hint=_WEIGHTS_HINT,
            )
        wanted = set(params)
        if bad := sorted(k for k, *_ in info.mismatched_keys if k in wanted):
            shapes = {k: (tuple(a), tuple(b)) for k, a, b in info.mismatched_keys}
            raise InputError(
                f"the target's tensor for {bad[0]!r} has shape {list(shapes[bad[0]][0])}, its config says "
                f"{list(shapes[bad[0]][1])}",
                path=self.directory,
                hint=_WEIGHTS_HINT,
            )
        if gone := sorted(wanted & set(info.missing_keys)):
            raise InputError(
                f"the target's checkpoint has no tensor for {gone[0]!r}", path=self.directory, hint=_WEIGHTS_HINT
            )

    def _release(self, unit: Unit) -> None:
        with self._lock:
            pending, unit.pending = unit.pending, None
        if pending is not None:
            pending.result()
        for name in unit.params:
            _set(self.model, name, _placeholder(self.model.get_parameter(name), self.device))
        unit.loaded = False

    def parameter(self, name: str) -> torch.Tensor:
        """One of the model's parameters, read from the checkpoint (e.g. the input embedding) and kept."""
        stream = next((s for s in self.experts if name in s.params), None)
        if stream is not None:  # a MoE layer's routed experts: every expert of them
            return stream.whole(name)
        unit = next(u for u in self.units if name in u.params)
        self._ensure(unit)
        value: torch.Tensor = self.model.get_parameter(name).detach()
        if not self.resident:
            self._release(unit)
        return value

    def embedding_name(self) -> str:
        emb = self.model.get_input_embeddings()
        return str(next(n for n, p in self.model.named_parameters() if p is emb.weight))

    def close(self) -> None:
        for h in self._hooks:
            h.remove()
        for stream in self.experts:
            stream.close()
        self._reader.shutdown(wait=True)

    # ------------------------------------------------------------------------------------------------ running

    @contextmanager
    def capturing(
        self, wanted: Iterable[int], on_layer: Callable[[int], None] | None = None
    ) -> Iterator[dict[int, list[torch.Tensor]]]:
        """Hooks that append boundary j's states ``[B, S, H]`` (one entry per forward) while inside."""
        want = set(wanted)
        got: dict[int, list[torch.Tensor]] = {j: [] for j in sorted(want)}
        handles = []
        n = self.num_layers
        for i, layer in enumerate(self.layers):
            if i in want:

                def pre(_m: Any, args: Any, kwargs: Any, i: int = i) -> None:
                    got[i].append(_first(args, kwargs).detach())

                handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))

            def post(_m: Any, _args: Any, out: Any, i: int = i) -> None:
                if i == n - 1 and n in want:
                    got[n].append(_output(out).detach())
                if on_layer is not None:
                    on_layer(i)

            handles.append(layer.register_forward_hook(post))
        try:
            yield got
        finally:
            for h in handles:
                h.remove()

    @torch.no_grad()
    def forward(
        self,
        ids: torch.Tensor,
        *,
        capture: Iterable[int] = (),
        lengths: Sequence[int] | None = None,
        on_layer: Callable[[int], None] | None = None,
    ) -> TargetOutput:
        """A teacher-forced pass over ``ids`` [T] (``lengths``: several sequences end to end), run as one
        right-padded batch (nothing a real token computes depends on a later one)."""
        lengths = list(lengths) if lengths is not None else [int(ids.numel())]
        if sum(lengths) != ids.numel() or any(n < 1 for n in lengths):
            raise InputError(f"lengths {lengths} do not add up to {ids.numel()} tokens")
        wanted = sorted(set(capture))
        check_boundaries(self.num_layers, wanted)
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < self.vocab_size:
            raise InputError(f"token ids must lie in 0..{self.vocab_size - 1} (the target's vocabulary)")
        width = max(lengths)
        batch = torch.zeros(len(lengths), width, dtype=torch.int64)
        for row, part in enumerate(torch.split(ids, lengths)):
            batch[row, : part.numel()] = part
        final: list[torch.Tensor] = []
        head = self.model.get_output_embeddings()
        hook = head.register_forward_pre_hook(lambda _m, args: final.append(args[0].detach()))
        try:
            with self.capturing(wanted, on_layer) as got:
                out = self.model(input_ids=batch.to(self.device), use_cache=False, logits_to_keep=0)
        finally:
            hook.remove()

        def packed(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t[row, :n] for row, n in enumerate(lengths)])

        return TargetOutput(
            {j: packed(got[j][0]) for j in wanted},
            packed(out.logits),
            packed(final[0]),
        )

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        new_tokens: int,
        *,
        capture: Iterable[int] = (),
        eos: int | None = None,
        on_step: Callable[[int], None] | None = None,
        sample_seed: int | None = None,
    ) -> Generated:
        """Each prompt continued by ``new_tokens`` tokens (or through ``eos``), greedy or sampled, by transformers'
        own KV-cached ``generate`` (the family's own cache: linear attention, sliding windows, Mamba states) on one
        left-padded batch; the states of every position but the last are captured on the way."""
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        wanted = sorted(set(capture))
        check_request(self.num_layers, self.vocab_size, prompts, new_tokens, wanted)
        width = max(len(p) for p in prompts)
        pad = [width - len(p) for p in prompts]
        ids = torch.tensor([[0] * n + list(p) for n, p in zip(pad, prompts, strict=True)])
        mask = torch.tensor([[0] * n + [1] * len(p) for n, p in zip(pad, prompts, strict=True)])
        choices = Choices(sample_seed)
        steps = [0]

        def choose(_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            picked = choices.pick(scores.float().cpu())
            if on_step is not None:
                on_step(steps[0])
            steps[0] += 1
            forced = torch.full_like(scores, float("-inf"))
            forced[torch.arange(scores.shape[0]), picked.to(scores.device)] = 0.0
            return forced

        config = GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=new_tokens,
            do_sample=False,
            num_beams=1,
            eos_token_id=None,
            pad_token_id=0,
            bos_token_id=None,
            use_cache=True,
            # Gemma 4's KV-shared layers (E2B, E4B) run only the last prompt position in the prefill unless the
            # states of every position are asked for: asked for, the hooks see them all
            output_hidden_states=bool(wanted) and bool(getattr(self.text, "num_kv_shared_layers", 0)),
        )
        # generate fills what a given config leaves at its default from the model's own generation config (the
        # target's eos and pad ids, which would end or pad a row behind the choices): the model's is ours for the call
        self.model.generation_config = config
        with self.capturing(wanted) as got:
            self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=config,
                logits_processor=LogitsProcessorList([choose]),
                stopping_criteria=StoppingCriteriaList([stop_when_ended(choices, eos, len(prompts))]),
            )
        kept = {j: torch.cat(got[j], dim=1) for j in wanted}
        return choices.result(prompts, pad, kept, eos)


def stop_when_ended(choices: Choices, eos: int | None, rows: int) -> Callable[..., torch.Tensor]:
    """The generation's stopping criterion: every row has generated ``eos``. Its mask is on the ids' device, where
    transformers ORs it into its own (a CPU mask stopped every generation on CUDA: the GPU check found it)."""

    def done(ids: torch.Tensor, _scores: torch.Tensor, **_: Any) -> torch.Tensor:
        return torch.full((rows,), choices.ended(eos), dtype=torch.bool, device=ids.device)

    return done


def _set(model: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    owner, _, attr = name.rpartition(".")
    module = model.get_submodule(owner) if owner else model
    setattr(module, attr, value if isinstance(value, torch.nn.Parameter) else torch.nn.Parameter(value, False))


def _placeholder(value: torch.Tensor, device: torch.device, shape: tuple[int, ...] | None = None) -> torch.nn.Parameter:
    """A parameter that is not read: its shape (or ``shape``) and dtype on the compute device, one element of
    storage (NaN, so a use outside its module's forward cannot pass unnoticed). Not the meta device: models read
    ``weight.device`` before a module's forward (``input_ids.to(self.embed_tokens.weight.device)``)."""
    fill = float("nan") if value.is_floating_point() else 0
    one = torch.full((), fill, dtype=value.dtype, device=device)
    return torch.nn.Parameter(one.expand(value.shape if shape is None else shape), requires_grad=False)


def _first(args: Any, kwargs: Any) -> torch.Tensor:
    value = args[0] if args else kwargs.get("hidden_states")
    if not isinstance(value, torch.Tensor):
        raise InputError("a decoder layer of the target was called without its hidden states")
    return value


def _output(out: Any) -> torch.Tensor:
    value = out[0] if isinstance(out, tuple | list) else out
    if not isinstance(value, torch.Tensor):
        raise InputError("a decoder layer of the target returned no hidden states")
    return value
