"""Quickstart: compile a GPT-style model with inductor_lite and check it against eager.

Runs one forward and one training step (loss.backward) of `examples/gpt.py`, both
eagerly and through ``torch.compile(backend="inductor_lite")``, on the GPU when there
is one and on the CPU (kernels run in the DSL interpreter) otherwise. Prints the
number of kernels generated, of aten fallback calls, and the largest errors; exits 1
if the logits, the loss or any gradient is outside fp32 tolerance.

    python examples/quickstart.py
    INDUCTOR_LITE_LOGS=output_code python examples/quickstart.py   # see the kernels
"""

from __future__ import annotations

import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import inductor_lite  # noqa: E402  (registers the backend; the entry point does too)
from gpt import GPT, GPTConfig, lm_loss  # noqa: E402

# fp32 tolerances: the compiled graph fuses and reorders fp32 arithmetic, and the
# backward pass accumulates through several matmuls.
RTOL, ATOL = 1e-4, 1e-5


def max_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return (actual.double() - expected.double()).abs().max().item()


def main() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=512, block_size=64, n_layer=2, n_head=4, n_embd=128)
    eager_model = GPT(cfg).to(device)
    compiled_model = copy.deepcopy(eager_model)
    compiled = torch.compile(compiled_model, backend="inductor_lite")

    idx = torch.randint(0, cfg.vocab_size, (4, cfg.block_size), device=device)
    targets = torch.randint(0, cfg.vocab_size, (4, cfg.block_size), device=device)

    inductor_lite.reset_counters()
    expected = eager_model(idx)
    actual = compiled(idx)
    lm_loss(expected, targets).backward()
    loss = lm_loss(actual, targets)
    loss.backward()

    errors = {"logits": max_error(actual, expected)}
    ok = torch.allclose(actual, expected, rtol=RTOL, atol=ATOL)
    for (name, p_eager), p_comp in zip(eager_model.named_parameters(), compiled_model.parameters()):
        errors[f"grad {name}"] = max_error(p_comp.grad, p_eager.grad)
        ok &= torch.allclose(p_comp.grad, p_eager.grad, rtol=RTOL, atol=ATOL)
    ok &= bool(torch.isfinite(loss))

    c = inductor_lite.counters
    worst = max(errors, key=errors.get)
    print(f"device:            {device} ({torch.cuda.get_device_name() if device == 'cuda' else 'interpreter'})")
    print(f"graphs compiled:   {c['graphs_compiled']} (eager fallbacks: {c['graphs_fallback']})")
    print(f"kernels generated: {c['kernels_generated']} (distinct: {c['kernels_defined']})")
    print(f"kernels compiled:  {c['kernels_compiled']} (cache hits: {c['cache_hits']})")
    print(f"fallback calls:    {c['extern_calls']}")
    print(f"max error:         logits {errors['logits']:.3e}; worst {worst} {errors[worst]:.3e}")
    print("PASS" if ok else "FAIL: compiled results differ from eager")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
