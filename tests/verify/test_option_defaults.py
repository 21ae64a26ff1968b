"""One default per option, in one named constant (the command line's defaults are the requests' fields, derived
from them: there is no copy to compare), and ``--dtype auto`` has one meaning for the reference models and another,
named differently, for the engine level."""

from __future__ import annotations

import inspect
from dataclasses import fields

from typer.main import get_command

from eagle_convert.cli.main import app
from eagle_convert.normalize.request import DEFAULT_PROFILE, NormalizeRequest
from eagle_convert.real_engine.base import (
    DEFAULT_ENGINE_DEVICE,
    DEFAULT_ENGINE_DTYPE,
    ENGINE_DTYPE_AUTO,
    EngineRequest,
    EngineSettings,
    engine_dtype,
)
from eagle_convert.reference import compute
from eagle_convert.reference.budget import MIN_POSITIONS, PROBE_STEPS


def test_reference_defaults_are_one_constant_everywhere() -> None:
    """compute.resolve, the option group of --device/--dtype (verify's and normalize's) and normalize agree."""
    resolve = inspect.signature(compute.resolve).parameters
    assert (resolve["device"].default, resolve["dtype"].default) == (compute.DEFAULT_DEVICE, compute.DEFAULT_DTYPE)
    assert compute.ComputeRequest() == compute.ComputeRequest(compute.DEFAULT_DEVICE, compute.DEFAULT_DTYPE)
    assert compute.DEFAULT_DTYPE == compute.REFERENCE_DTYPE_AUTO == compute.DTYPE_CHOICES[0]
    request = NormalizeRequest()
    assert (request.probe_positions, request.probe_steps) == (MIN_POSITIONS, PROBE_STEPS)
    assert request.profile == DEFAULT_PROFILE


def test_the_engine_level_has_its_own_auto() -> None:
    """EngineSettings' default is the engine's auto (float32 on a CPU); what an engine is given by default is
    that auto resolved for the default device."""
    settings = EngineSettings()
    assert (settings.dtype, settings.device) == (DEFAULT_ENGINE_DTYPE, DEFAULT_ENGINE_DEVICE)
    assert DEFAULT_ENGINE_DTYPE == ENGINE_DTYPE_AUTO
    request_dtype = next(f.default for f in fields(EngineRequest) if f.name == "dtype")
    assert request_dtype == engine_dtype(DEFAULT_ENGINE_DTYPE, DEFAULT_ENGINE_DEVICE) == "float32"
    assert engine_dtype(ENGINE_DTYPE_AUTO, "cuda") == ENGINE_DTYPE_AUTO  # the engine's own auto, passed on


def test_dtype_help_names_both_autos() -> None:
    """verify hands --dtype to the reference and to the engine level: its help says what auto is for each;
    normalize runs only the reference, and says only that."""
    verify = next(p for p in get_command(app).commands["verify"].params if p.name == "dtype")  # type: ignore[attr-defined]
    normalize = next(p for p in get_command(app).commands["normalize"].params if p.name == "dtype")  # type: ignore[attr-defined]
    assert "the reference's auto" in (verify.help or "") and "the engine's auto" in (verify.help or "")
    assert "the reference's auto" in (normalize.help or "") and "engine" not in (normalize.help or "")
