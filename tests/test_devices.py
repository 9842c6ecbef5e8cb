"""Where the models of an analysis run: ``vizlm.load(..., device=)``, the CLI's ``--device`` for analyze /
attribute / positions / compare / cases, and the app's ``--device``. On a machine without CUDA, ``cpu``
and ``auto`` (which resolves to the CPU) run through the same code as a GPU would, and ``cuda`` is a
one-line error (exit 2 on the CLI), never a traceback."""

from __future__ import annotations

import json

import pytest
import torch

import vizlm
from vizlm import cli
from vizlm.core.errors import InputError

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
TEXT = "the jury said the city had a report . it said the report was good ."


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("txt") / "two.txt"
    path.write_text("The jury said the city had a report.\nIt said the report was good.\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_load_on_a_device_analyses_as_on_the_cpu(device):
    """``load(device=)`` puts the model there; an analysis gives the same numbers as the default load."""
    here = vizlm.load("amsrn", device=device)
    assert {p.device.type for p in here.checkpoint.model.parameters()} == {"cpu"}
    got, want = here.analyze(TEXT), vizlm.load("amsrn").analyze(TEXT)
    assert got.targets == want.targets
    assert got.logprobs.tolist() == want.logprobs.tolist()  # the same kernels on the same device: bit for bit
    assert got.attention.tolist() == want.attention.tolist()


@no_cuda
def test_load_on_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(InputError, match=r"^device='cuda': this PyTorch sees no CUDA device") as info:
        vizlm.load("amsrn", device="cuda")
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="unknown device 'tpu'"):
        vizlm.load("amsrn", device="tpu")


def _commands(text_file):
    return {
        "analyze": ["analyze", "--checkpoint", "amsrn", "--text", TEXT, "--json"],
        "attribute": ["attribute", "--checkpoint", "kvp", "--text", "the jury said it", "--method",
                      "gradient-x-input", "--json"],
        "positions": ["positions", "--checkpoint", "kvp", "--text-file", str(text_file), "--window", "3", "--json"],
        "compare": ["compare", "--a", "lstm", "--b", "amsrn", "--text-file", str(text_file), "--json"],
        "cases": ["cases", "--checkpoint", "amsrn", "--text-file", str(text_file), "--json"],
    }


@pytest.mark.parametrize("command", ["analyze", "attribute", "positions", "compare", "cases"])
def test_every_analysis_command_runs_on_cpu_and_auto(command, text_file, capsys):
    outputs = []
    for device in ("cpu", "auto"):
        assert cli.main([*_commands(text_file)[command], "--device", device]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]  # auto is the CPU here: the same result


@no_cuda
@pytest.mark.parametrize("command", ["analyze", "attribute", "positions", "compare", "cases"])
def test_every_analysis_command_on_cuda_without_cuda_exits_2(command, text_file, capsys):
    assert cli.main([*_commands(text_file)[command], "--device", "cuda"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "sees no CUDA device" in captured.err and "Traceback" not in captured.err
    assert captured.err.strip().count("\n") == 0  # one line


def test_the_app_runs_its_models_where_its_device_flag_says():
    from vizlm.app import checkpoints
    from vizlm.app.shell import AppArgumentError, apply_arguments

    try:
        apply_arguments(["--device", "auto"])
        assert checkpoints.device() == "cpu"
        ckpt = checkpoints.get_checkpoint("amsrn")
        assert {p.device.type for p in ckpt.model.parameters()} == {"cpu"}
        if not torch.cuda.is_available():
            with pytest.raises(AppArgumentError, match=r"^--device cuda: this PyTorch sees no CUDA device"):
                apply_arguments(["--device", "cuda"])
            assert checkpoints.device() == "cpu"  # a refused flag leaves the device as it was
    finally:
        checkpoints.set_device("cpu")


def test_the_app_loaders_cache_per_device():
    """A model loaded for one device is not handed out for another: the device is part of the cache key."""
    from vizlm.app import checkpoints

    folder = str(checkpoints.checkpoint_folders()["amsrn"])
    version = checkpoints._version(checkpoints.checkpoint_folders()["amsrn"])
    once = checkpoints._load_folder(folder, version, "cpu")
    assert checkpoints._load_folder(folder, version, "cpu") is once
    other = checkpoints._load_folder(folder, version, "cpu:0")  # another device name: another entry
    assert other is not once
