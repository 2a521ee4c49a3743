"""The benchmark suite: models built offline from configs with random weights.

Three suites:

- ``builtin`` (torch only): ``mlp`` and ``gpt`` (the GPT-style stack of ``examples/gpt.py``);
- ``hf`` (needs ``transformers``): ``bert_base``, ``distilbert``, ``gpt2``, ``t5_small``,
  ``llama_small``, ``vit_base``;
- ``timm`` (needs ``timm``): ``resnet50``, ``mobilenetv3_large_100``, ``convnext_tiny``,
  ``vit_small``.

Nothing is downloaded: HuggingFace models come from their ``*Config`` classes, timm
models from ``timm.create_model(name, pretrained=False)``. Every model is returned as an
``nn.Module`` whose forward takes positional tensors and returns one logits tensor
``[..., num_classes]``; ``BenchInputs.target`` holds int64 class ids of shape
``logits.shape[:-1]`` for the training loss. Dropout is off everywhere so that compiled
and eager runs are comparable (compiled dropout draws different random numbers).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

SUITES = ("builtin", "hf", "timm")


@dataclasses.dataclass(frozen=True)
class BenchInputs:
    """One seeded batch for a model.

    Attributes:
        args: the model's positional inputs (int64 token ids or float pixel values, on
            the target device).
        target: int64 class ids with the shape of the logits without their last axis.
    """

    args: tuple[torch.Tensor, ...]
    target: torch.Tensor


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """How to build one benchmark model and its inputs.

    Attributes:
        name: the ``--models`` name.
        suite: one of `SUITES`.
        requires: the optional package the model needs (``None``: torch alone).
        batch_size: default batch size (full-size configs, GPU).
        tiny_batch_size: default batch size with ``tiny=True``.
        build_fn: ``build_fn(tiny) -> nn.Module`` in fp32 on the CPU.
        inputs_fn: ``inputs_fn(batch_size, tiny, generator) -> BenchInputs`` on the CPU.
    """

    name: str
    suite: str
    requires: str | None
    batch_size: int
    tiny_batch_size: int
    build_fn: Callable[[bool], nn.Module]
    inputs_fn: Callable[[int, bool, torch.Generator], BenchInputs]

    def unavailable_reason(self) -> str | None:
        """Why the model cannot be built here (a missing package), or ``None``."""
        if self.requires is None:
            return None
        if importlib.util.find_spec(self.requires) is None:
            return f"{self.requires} is not installed (pip install inductor_lite[models])"
        return None

    def build(self, tiny: bool, seed: int = 0) -> nn.Module:
        """The model with weights drawn from ``torch.manual_seed(seed)``, fp32, CPU, train mode.

        Raises:
            ImportError: the model's package is missing.
        """
        reason = self.unavailable_reason()
        if reason:
            raise ImportError(f"model {self.name!r}: {reason}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.build_fn(tiny)

    def make_inputs(
        self, batch_size: int | None, tiny: bool, device: torch.device | str, seed: int = 0
    ) -> BenchInputs:
        """A seeded random batch on ``device`` (drawn on the CPU so every device sees the same values).

        Raises:
            ValueError: ``batch_size`` below 1.
        """
        if batch_size is None:
            batch_size = self.tiny_batch_size if tiny else self.batch_size
        if batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {batch_size}")
        gen = torch.Generator().manual_seed(seed)
        inputs = self.inputs_fn(batch_size, tiny, gen)
        return BenchInputs(tuple(a.to(device) for a in inputs.args), inputs.target.to(device))


# ---------------------------------------------------------------- input makers


def _token_inputs(vocab: int, seq_len: int, n_args: int = 1) -> Callable[[int, bool, torch.Generator], BenchInputs]:
    """``n_args`` int64 id tensors ``[B, T]`` and a target ``[B, T]``, all in ``[0, vocab)``."""

    def make(batch: int, tiny: bool, gen: torch.Generator) -> BenchInputs:
        shape = (batch, seq_len)
        args = tuple(torch.randint(0, vocab, shape, generator=gen) for _ in range(n_args))
        return BenchInputs(args, torch.randint(0, vocab, shape, generator=gen))

    return make


def _sized(tiny_fn, full_fn) -> Callable[[int, bool, torch.Generator], BenchInputs]:
    """Pick the input maker of the tiny or the full config."""
    return lambda batch, tiny, gen: (tiny_fn if tiny else full_fn)(batch, tiny, gen)


def _image_inputs(size: int, num_classes: int) -> Callable[[int, bool, torch.Generator], BenchInputs]:
    """Pixel values ``[B, 3, size, size]`` ~ N(0, 1) and class ids ``[B]``."""

    def make(batch: int, tiny: bool, gen: torch.Generator) -> BenchInputs:
        pixels = torch.randn(batch, 3, size, size, generator=gen)
        return BenchInputs((pixels,), torch.randint(0, num_classes, (batch,), generator=gen))

    return make


def _vector_inputs(features: int, num_classes: int) -> Callable[[int, bool, torch.Generator], BenchInputs]:
    """Features ``[B, features]`` ~ N(0, 1) and class ids ``[B]``."""

    def make(batch: int, tiny: bool, gen: torch.Generator) -> BenchInputs:
        x = torch.randn(batch, features, generator=gen)
        return BenchInputs((x,), torch.randint(0, num_classes, (batch,), generator=gen))

    return make


# ---------------------------------------------------------------- builtin

_MLP_FULL = dict(features=1024, hidden=4096, classes=1000, layers=4)
_MLP_TINY = dict(features=32, hidden=64, classes=10, layers=3)


def _build_mlp(tiny: bool) -> nn.Module:
    cfg = _MLP_TINY if tiny else _MLP_FULL
    dims = [cfg["features"]] + [cfg["hidden"]] * (cfg["layers"] - 1)
    layers: list[nn.Module] = []
    for d_in, d_out in zip(dims, dims[1:]):
        layers += [nn.Linear(d_in, d_out), nn.LayerNorm(d_out), nn.GELU()]
    layers.append(nn.Linear(dims[-1], cfg["classes"]))
    return nn.Sequential(*layers)


_GPT_FULL = dict(vocab_size=50304, block_size=1024, n_layer=12, n_head=12, n_embd=768)  # GPT-2 small
_GPT_TINY = dict(vocab_size=128, block_size=16, n_layer=2, n_head=2, n_embd=32)


@functools.cache
def _examples_gpt():
    """``examples/gpt.py`` of the source checkout, imported by path (``examples`` is no package)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "gpt.py"
    if not path.is_file():
        raise ImportError(f"{path} not found: the gpt model needs a source checkout of inductor_lite")
    spec = importlib.util.spec_from_file_location("inductor_lite_examples_gpt", path)
    module = importlib.util.module_from_spec(spec)
    # Registered before exec so dataclasses can resolve the module's annotations.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _build_gpt(tiny: bool) -> nn.Module:
    gpt = _examples_gpt()
    return gpt.GPT(gpt.GPTConfig(**(_GPT_TINY if tiny else _GPT_FULL)))


def _gpt_inputs(batch: int, tiny: bool, gen: torch.Generator) -> BenchInputs:
    cfg = _GPT_TINY if tiny else _GPT_FULL
    return _token_inputs(cfg["vocab_size"], cfg["block_size"])(batch, tiny, gen)


# ---------------------------------------------------------------- HuggingFace


class HFLogits(nn.Module):
    """Calls a transformers model with named tensors and returns only its ``logits``.

    ``forward(*tensors)`` maps the tensors onto ``input_names`` in order.
    """

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.input_names = input_names

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.input_names, tensors))).logits


_SEQ_LEN = 512
_TINY_SEQ_LEN = 16
_TINY_VOCAB = 128


def _hf_model(class_name: str, config_name: str, full: dict, tiny: dict, input_names: tuple[str, ...]):
    """A builder for ``transformers.<class_name>(transformers.<config_name>(**kwargs))``."""

    def build(is_tiny: bool) -> nn.Module:
        transformers = importlib.import_module("transformers")
        transformers.logging.set_verbosity_error()
        config = getattr(transformers, config_name)(**(tiny if is_tiny else full))
        return HFLogits(getattr(transformers, class_name)(config), input_names)

    return build


_BERT_NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_BERT_TINY = dict(
    vocab_size=_TINY_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=64, **_BERT_NO_DROPOUT,
)
_DISTILBERT_TINY = dict(
    vocab_size=_TINY_VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
    max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
)
_GPT2_NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
_GPT2_TINY = dict(vocab_size=_TINY_VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2, **_GPT2_NO_DROPOUT)
_T5_TINY = dict(
    vocab_size=_TINY_VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
    dropout_rate=0.0, use_cache=False,
)
_LLAMA_SMALL = dict(
    vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
    num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=2048, use_cache=False,
)
_LLAMA_TINY = dict(
    vocab_size=_TINY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, use_cache=False,
)
_VIT_NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_VIT_TINY = dict(
    image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, num_labels=10, **_VIT_NO_DROPOUT,
)


def _hf_text(name: str, class_name: str, config_name: str, full: dict, tiny: dict, n_args: int = 1) -> ModelSpec:
    names = ("input_ids", "decoder_input_ids")[:n_args]
    vocab = full["vocab_size"]
    return ModelSpec(
        name=name, suite="hf", requires="transformers", batch_size=8, tiny_batch_size=2,
        build_fn=_hf_model(class_name, config_name, full, tiny, names),
        inputs_fn=_sized(_token_inputs(_TINY_VOCAB, _TINY_SEQ_LEN, n_args), _token_inputs(vocab, _SEQ_LEN, n_args)),
    )


_HF_SPECS = [
    # Full sizes are the defaults of each config class (BERT-base, DistilBERT-base,
    # GPT-2 small, t5-small, ViT-B/16), with dropout off and the KV cache disabled.
    _hf_text("bert_base", "BertForMaskedLM", "BertConfig", dict(vocab_size=30522, **_BERT_NO_DROPOUT), _BERT_TINY),
    _hf_text(
        "distilbert", "DistilBertForMaskedLM", "DistilBertConfig",
        dict(vocab_size=30522, dropout=0.0, attention_dropout=0.0), _DISTILBERT_TINY,
    ),
    _hf_text("gpt2", "GPT2LMHeadModel", "GPT2Config", dict(vocab_size=50257, **_GPT2_NO_DROPOUT), _GPT2_TINY),
    _hf_text(
        "t5_small", "T5ForConditionalGeneration", "T5Config",
        dict(vocab_size=32128, dropout_rate=0.0, use_cache=False), _T5_TINY, n_args=2,
    ),
    _hf_text("llama_small", "LlamaForCausalLM", "LlamaConfig", _LLAMA_SMALL, _LLAMA_TINY),
    ModelSpec(
        name="vit_base", suite="hf", requires="transformers", batch_size=32, tiny_batch_size=2,
        build_fn=_hf_model(
            "ViTForImageClassification", "ViTConfig", dict(num_labels=1000, **_VIT_NO_DROPOUT), _VIT_TINY,
            ("pixel_values",),
        ),
        inputs_fn=_sized(_image_inputs(32, 10), _image_inputs(224, 1000)),
    ),
]

# ---------------------------------------------------------------- timm

_TIMM_IMAGE, _TIMM_TINY_IMAGE = 224, 64
_TIMM_CLASSES, _TIMM_TINY_CLASSES = 1000, 10


def _timm_model(timm_name: str, tiny_kwargs: dict) -> Callable[[bool], nn.Module]:
    """``timm.create_model(timm_name, pretrained=False)``; tiny: 10 classes (+ ``tiny_kwargs``)."""

    def build(tiny: bool) -> nn.Module:
        timm = importlib.import_module("timm")
        kwargs = dict(num_classes=_TIMM_TINY_CLASSES, **tiny_kwargs) if tiny else {}
        return timm.create_model(timm_name, pretrained=False, drop_rate=0.0, drop_path_rate=0.0, **kwargs)

    return build


def _timm(name: str, timm_name: str, tiny_kwargs: dict | None = None) -> ModelSpec:
    return ModelSpec(
        name=name, suite="timm", requires="timm", batch_size=32, tiny_batch_size=2,
        build_fn=_timm_model(timm_name, tiny_kwargs or {}),
        inputs_fn=_sized(
            _image_inputs(_TIMM_TINY_IMAGE, _TIMM_TINY_CLASSES), _image_inputs(_TIMM_IMAGE, _TIMM_CLASSES)
        ),
    )


_TIMM_SPECS = [
    _timm("resnet50", "resnet50"),
    _timm("mobilenetv3_large_100", "mobilenetv3_large_100"),
    _timm("convnext_tiny", "convnext_tiny"),
    # The ViT's position embedding is sized by img_size, so the tiny input needs it.
    _timm("vit_small", "vit_small_patch16_224", dict(img_size=_TIMM_TINY_IMAGE)),
]

_BUILTIN_SPECS = [
    ModelSpec(
        name="mlp", suite="builtin", requires=None, batch_size=256, tiny_batch_size=8,
        build_fn=_build_mlp,
        inputs_fn=_sized(
            _vector_inputs(_MLP_TINY["features"], _MLP_TINY["classes"]),
            _vector_inputs(_MLP_FULL["features"], _MLP_FULL["classes"]),
        ),
    ),
    ModelSpec(
        name="gpt", suite="builtin", requires=None, batch_size=8, tiny_batch_size=2,
        build_fn=_build_gpt, inputs_fn=_gpt_inputs,
    ),
]

MODELS: dict[str, ModelSpec] = {s.name: s for s in _BUILTIN_SPECS + _HF_SPECS + _TIMM_SPECS}
"""Every model of the suite by ``--models`` name, builtin first."""


def resolve_models(selection: str) -> list[ModelSpec]:
    """The models named by a comma-separated ``--models`` value, in order, without repeats.

    Each item is a model name (a key of `MODELS`), a suite name (``builtin``, ``hf``,
    ``timm``) or ``all``.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or an empty selection.
    """
    chosen: dict[str, ModelSpec] = {}
    items = [item.strip() for item in selection.split(",") if item.strip()]
    if not items:
        raise ValueError("no models selected")
    for item in items:
        if item == "all":
            chosen.update(MODELS)
        elif item in SUITES:
            chosen.update({n: s for n, s in MODELS.items() if s.suite == item})
        elif item in MODELS:
            chosen[item] = MODELS[item]
        else:
            raise ValueError(
                f"unknown model or suite {item!r}; suites: all, {', '.join(SUITES)}; models: {', '.join(MODELS)}"
            )
    return list(chosen.values())
