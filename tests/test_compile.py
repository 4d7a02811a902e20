"""The model under torch.compile computes what eager computes, without recompiling for every sequence length."""

from __future__ import annotations

import pytest
import torch
from conftest import random_ids, tiny_config

import sinusoidal_encoder as se


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_equals_eager_across_lengths():
    model = se.SinusoidalEncoderForMaskedLM(tiny_config()).eval()
    compiled = torch.compile(model, dynamic=True, fullgraph=True)
    with torch.no_grad():
        for length in (9, 17, 40):
            ids = random_ids(2, length, seed=length)
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits, atol=1e-5, rtol=1e-5)


def test_compiled_training_step_equals_eager():
    config = tiny_config(sparse_prediction=True)
    eager = se.SinusoidalEncoderForMaskedLM(config)
    twin = se.SinusoidalEncoderForMaskedLM(config)
    twin.load_state_dict(eager.state_dict())
    compiled = torch.compile(twin, dynamic=True)
    ids = random_ids(2, 16)
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, torch.full_like(ids, -100))
    labels[0, 0] = 5
    loss_eager, loss_compiled = eager(ids, labels=labels).loss, compiled(ids, labels=labels).loss
    torch.testing.assert_close(loss_compiled, loss_eager, atol=1e-5, rtol=1e-5)
    loss_eager.backward()
    loss_compiled.backward()
    for (name, a), b in zip(eager.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_one_graph_serves_every_sequence_length():
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    with torch.no_grad():
        for length in (5, 11, 64, 300):
            compiled(random_ids(2, length, seed=length))
    assert counter.frame_count == 1  # no recompilation per length, no graph break (fullgraph)


def test_padded_batches_compile_without_graph_breaks():
    """Unpadding has data-dependent shapes, so compiled graphs take the padded path: still one graph, same result."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    model = se.SinusoidalEncoderModel(tiny_config()).eval()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    ids = random_ids(3, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    with torch.no_grad():
        got = compiled(ids, attention_mask=mask).last_hidden_state
        expected = model(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-5)
    assert counter.frame_count == 1
