"""Do mlbench's placement estimates agree with what people have published about Core ML?

Each entry of benchmarks/placement_observations.yaml is one published observation of where Core ML
ran operations (an Xcode performance report, a compute plan, Instruments, an Apple engineer), with
its source. For each entry this script builds a small PyTorch model that has what the observation
is about (seeded, random weights; tiny shapes except where the observation's shape matters),
exports it through mlbench's exporter, analyses the package, asks `estimate_placement` where each
op would run under the entry's compute units, and checks the entry's `expect`. It prints a table
and "agreement: N of M" (and the same without the entries marked `weight: low`).

It is a report, not a test: it exits 0 whatever the agreement (and when a model fails to export,
that entry is reported as an error).

`expect` is one clause or a list of clauses; every clause must hold:
  {op_type: T, device: D}       every op of type T (a name or a list of names) is on device D;
                                at least one such op must exist
  {op_type: T, not_device: D}   ... none of them is on D
  {output_dtype: fp32, device: D}   every op with that output dtype (boundary casts left out);
                                output_dtype and output_shape ([1, 1, 50257]) also narrow an op_type
  {all_ops: D}                  every compute op is on D
  {none_on: D}                  no compute op is on D
  {majority: D}                 D holds more ops than any other device
  {min_share: {D: f}}           at least the fraction f of the compute ops are on D
  {uses: D}                     at least one compute op is on D
Devices: neural_engine, gpu, cpu. The casts coremltools adds at the program boundary (float32
inputs to float16, float16 outputs back to float32) are left out of every clause, because published
reports of models "fully on the Neural Engine" (e.g. 602 of 606 ops, the 4 others embedding
lookups) leave no room for them on the CPU; the table still shows where the estimate put them.

Usage: python benchmarks/placement_sources.py [--only ID] [--cache DIR] [--dump]
  --cache DIR  keep the exported packages there and reuse them (keyed by the builder's source,
               precision and deployment target); default: a temporary folder, removed at the end
  --dump       also print every op with its estimated device and rule
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import math
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OBSERVATIONS = Path(__file__).with_name("placement_observations.yaml")
DEVICES = ("neural_engine", "gpu", "cpu")
SHORT = {"neural_engine": "NE", "gpu": "GPU", "cpu": "CPU", None: "?"}


# ----------------------------------------------------------------------------------------------
# Model builders: each returns (module, example inputs, input names). Imports stay inside, so that
# the test can load this file (and list BUILDERS) without torch.

@dataclass
class Built:
    module: Any
    inputs: list[Any]
    names: list[str]


BUILDERS: dict[str, Any] = {}


def builder(fn: Any) -> Any:
    BUILDERS[fn.__name__] = fn
    return fn


def _nn():
    import torch
    from torch import nn

    return torch, nn


@builder
def distilbert_like() -> Built:
    """A small BERT encoder (vocabulary 30522, width 128, 2 layers, seq 128): token ids from the input
    go through an embedding gather; attention by einsum (as Apple's ANE distilbert), softmax, layer_norm."""
    torch, nn = _nn()

    class Layer(nn.Module):
        def __init__(self, d: int, heads: int) -> None:
            super().__init__()
            self.h, self.dk = heads, d // heads
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff1, self.ff2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q = self.q(x).view(b, t, self.h, self.dk)
            k = self.k(x).view(b, t, self.h, self.dk)
            v = self.v(x).view(b, t, self.h, self.dk)
            w = torch.einsum("bqhc,bkhc->bhqk", q, k) / math.sqrt(self.dk)
            w = torch.softmax(w, dim=-1)
            a = torch.einsum("bhqk,bkhc->bqhc", w, v).reshape(b, t, d)
            x = self.ln1(x + self.o(a))
            return self.ln2(x + self.ff2(torch.nn.functional.gelu(self.ff1(x))))

    class Model(nn.Module):
        def __init__(self, vocab: int = 30522, d: int = 128, seq: int = 128, layers: int = 2) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList(Layer(d, 4) for _ in range(layers))

        def forward(self, ids):
            x = self.ln(self.tok(ids) + self.pos)
            for layer in self.layers:
                x = layer(x)
            return x

    return Built(Model(), [torch.randint(0, 30522, (1, 128))], ["ids"])


@builder
def gpt_like() -> Built:
    """nanoGPT-style (vocabulary 50257, width 64, 4 layers, 4 heads, seq 512): token and position
    embeddings, a constant causal mask (masked_fill with -inf), a tied lm_head of 50257 outputs."""
    torch, nn = _nn()
    vocab, d, seq, n_layers, heads = 50257, 64, 512, 4, 4

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

        def forward(self, x):  # shapes spelt as constants: the trace of x.shape arithmetic does not convert
            q, k, v = self.attn(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(1, seq, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // heads))
            att = att.masked_fill(self.bias == 0, float("-inf"))
            y = torch.softmax(att, dim=-1) @ v
            x = x + self.proj(y.transpose(1, 2).contiguous().view(1, seq, d))
            return x + self.fc_proj(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(n_layers))
            self.register_buffer("pos", torch.arange(seq))
            self.ln_f = nn.LayerNorm(d)
            self.lm_head = nn.Linear(d, vocab, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(self.pos)
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return Built(Model(), [torch.randint(0, vocab, (1, seq))], ["ids"])


@builder
def lm_head_50257() -> Built:
    """The end of gpt2: an MLP (linear, gelu, linear), the final layer_norm and the lm_head, a linear
    [768 -> 50257] on one token, output [1, 1, 50257] (enough ops that it is not a tiny program)."""
    torch, nn = _nn()
    return Built(nn.Sequential(nn.Linear(768, 768), nn.GELU(), nn.Linear(768, 768), nn.LayerNorm(768),
                               nn.Linear(768, 50257, bias=False)), [torch.randn(1, 1, 768)], ["x"])


@builder
def embedding_50257() -> Built:
    """gpt2's token embedding: a gather over a [50257, 768] table with 128 token ids from the input,
    then layer_norm and an MLP (enough ops that it is not a tiny program)."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(50257, 768)
            self.ln, self.fc1, self.fc2 = nn.LayerNorm(768), nn.Linear(768, 768), nn.Linear(768, 768)

        def forward(self, ids):
            return self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(self.wte(ids)))))

    return Built(Model(), [torch.randint(0, 50257, (1, 128))], ["ids"])


@builder
def gather_nd_small() -> Built:
    """A constant (2, 5) table indexed by two index tensors from the input (gather_nd)."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("x", torch.tensor([[3.0, 4, 5, 6, 7], [8, 9, 10, 11, 12]]))

        def forward(self, rows, cols):
            return self.x[rows, cols]

    return Built(Model(), [torch.tensor([1, 0]), torch.tensor([2, 4])], ["rows", "cols"])


@builder
def tril_attention() -> Built:
    """Attention scores [1, 4, 128, 128] masked with torch.tril on the scores (band_part), then softmax."""
    torch, nn = _nn()

    class Model(nn.Module):
        def forward(self, q, k, v):
            s = torch.tril(q @ k.transpose(-1, -2) / 8.0)
            return torch.softmax(s, dim=-1) @ v

    x = torch.randn(1, 4, 128, 64)
    return Built(Model(), [x, x.clone(), x.clone()], ["q", "k", "v"])


@builder
def kv_cache_dynamic_offset() -> Built:
    """A KV cache [1, 256, 64] read at an offset that comes from the input (a [1] int tensor): a
    16-row slice whose start is that value (slice_by_index), and an index_select of that row (gather)."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(64, 64)

        def forward(self, cache, pos):
            window = cache[:, pos[0]:pos[0] + 16]  # slice_by_index with a runtime begin
            picked = torch.index_select(cache, 1, pos)  # gather with a runtime index
            return self.proj(window).sum(1) + picked.sum(1)

    return Built(Model(), [torch.randn(1, 256, 64), torch.tensor([5])], ["cache", "pos"])


def _masked_attention(fill: float) -> Built:
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x, keep):
            q, k, v = self.qkv(x).split(64, dim=-1)
            mask = torch.where(keep > 0.5, 0.0, fill)  # the additive causal mask, [1, 128, 128]
            s = q @ k.transpose(-1, -2) / 8.0 + mask
            return torch.softmax(s, dim=-1) @ v

    keep = torch.tril(torch.ones(1, 128, 128))
    return Built(Model(), [torch.randn(1, 128, 64), keep], ["x", "keep"])


@builder
def mask_float32() -> Built:
    """Attention with an additive mask built from the input with -1e9: coremltools leaves an op whose
    constant does not fit float16 in float32 (FP16ComputePrecision's overflow check), so the mask is float32."""
    return _masked_attention(-1e9)


@builder
def mask_float16() -> Built:
    """The same attention with the mask built with -1e4 (fits float16): the whole program is float16."""
    return _masked_attention(-1e4)


@builder
def grid_sample_net() -> Built:
    """conv -> grid_sample (bilinear) -> conv on a [1, 16, 64, 64] map, the grid from the input."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)

        def forward(self, x, grid):
            y = torch.nn.functional.grid_sample(torch.relu(self.a(x)), grid, align_corners=False)
            return self.b(y)

    return Built(Model(), [torch.randn(1, 3, 64, 64), torch.rand(1, 64, 64, 2) * 2 - 1], ["x", "grid"])


@builder
def char_rnn() -> Built:
    """A text-generation RNN as in TensorFlow's tutorial: embedding (65 chars) -> LSTM(256) -> dense, seq 100."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.lstm, self.head = nn.Embedding(65, 64), nn.LSTM(64, 256, batch_first=True), nn.Linear(256, 65)

        def forward(self, ids):
            out, _ = self.lstm(self.emb(ids))
            return self.head(out)

    return Built(Model(), [torch.randint(0, 65, (1, 100))], ["ids"])


@builder
def lstm_stage() -> Built:
    """The LSTM stage of a pipeline: features [1, 50, 128] -> LSTM(128) -> dense."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm, self.head = nn.LSTM(128, 128, batch_first=True), nn.Linear(128, 32)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.head(out)

    return Built(Model(), [torch.randn(1, 50, 128)], ["x"])


def _matmul(n: int) -> Built:
    torch, nn = _nn()

    class Model(nn.Module):
        def forward(self, a, b):
            return a @ b

    return Built(Model(), [torch.randn(n, n), torch.randn(n, n)], ["a", "b"])


@builder
def matmul_4() -> Built:
    """One 4x4 @ 4x4 matmul of two inputs."""
    return _matmul(4)


@builder
def matmul_384() -> Built:
    """One 384x384 @ 384x384 matmul of two inputs (113 MFLOP)."""
    return _matmul(384)


@builder
def matmul_512() -> Built:
    """One 512x512 @ 512x512 matmul of two inputs (268 MFLOP)."""
    return _matmul(512)


def _sdpa(heads: int, seq: int, dim: int) -> Built:
    torch, nn = _nn()

    class Model(nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    x = torch.randn(1, heads, seq, dim)
    return Built(Model(), [x, x.clone(), x.clone()], ["q", "k", "v"])


@builder
def sdpa_16x1024x64() -> Built:
    """One scaled_dot_product_attention, Q/K/V [1, 16, 1024, 64] (1,048,576 elements each)."""
    return _sdpa(16, 1024, 64)


@builder
def sdpa_16x2048x64() -> Built:
    """One scaled_dot_product_attention, Q/K/V [1, 16, 2048, 64] (2,097,152 elements each)."""
    return _sdpa(16, 2048, 64)


@builder
def sdpa_32x1024x128() -> Built:
    """One scaled_dot_product_attention, Q/K/V [1, 32, 1024, 128] (4,194,304 elements each)."""
    return _sdpa(32, 1024, 128)


@builder
def mobilenet_v3_small() -> Built:
    """torchvision mobilenet_v3_small (weights=None) on a [1, 3, 224, 224] image."""
    torch, _ = _nn()
    import torchvision

    return Built(torchvision.models.mobilenet_v3_small(weights=None), [torch.randn(1, 3, 224, 224)], ["image"])


@builder
def u2net_like() -> Built:
    """A small U²-Net on [1, 3, 320, 320]: an RSU-4 stage (max_pool down, bilinear up, concat) and an
    RSU-4F stage whose 3x3 convs have dilation 2, 4 and 8, as U²-Net's REBNCONV(dirate=...)."""
    torch, nn = _nn()
    F = torch.nn.functional

    class Rebn(nn.Module):
        def __init__(self, cin: int, cout: int, dirate: int = 1) -> None:
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 3, padding=dirate, dilation=dirate)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    class Rsu4(nn.Module):
        def __init__(self, cin: int, mid: int, cout: int) -> None:
            super().__init__()
            self.cin = Rebn(cin, cout)
            self.e1, self.e2, self.e3, self.e4 = Rebn(cout, mid), Rebn(mid, mid), Rebn(mid, mid), Rebn(mid, mid, 2)
            self.d3, self.d2, self.d1 = Rebn(2 * mid, mid), Rebn(2 * mid, mid), Rebn(2 * mid, cout)

        def forward(self, x):
            xin = self.cin(x)
            h1 = self.e1(xin)
            h2 = self.e2(F.max_pool2d(h1, 2, 2, ceil_mode=True))
            h3 = self.e3(F.max_pool2d(h2, 2, 2, ceil_mode=True))
            h4 = self.e4(h3)
            d3 = self.d3(torch.cat((h4, h3), 1))
            d2 = self.d2(torch.cat((F.interpolate(d3, size=h2.shape[2:], mode="bilinear"), h2), 1))
            d1 = self.d1(torch.cat((F.interpolate(d2, size=h1.shape[2:], mode="bilinear"), h1), 1))
            return d1 + xin

    class Rsu4F(nn.Module):
        def __init__(self, cin: int, mid: int, cout: int) -> None:
            super().__init__()
            self.cin = Rebn(cin, cout)
            self.e1, self.e2, self.e3, self.e4 = Rebn(cout, mid), Rebn(mid, mid, 2), Rebn(mid, mid, 4), Rebn(mid, mid, 8)
            self.d3, self.d2, self.d1 = Rebn(2 * mid, mid, 4), Rebn(2 * mid, mid, 2), Rebn(2 * mid, cout)

        def forward(self, x):
            xin = self.cin(x)
            h1 = self.e1(xin)
            h2 = self.e2(h1)
            h3 = self.e3(h2)
            h4 = self.e4(h3)
            d3 = self.d3(torch.cat((h4, h3), 1))
            d2 = self.d2(torch.cat((d3, h2), 1))
            return self.d1(torch.cat((d2, h1), 1)) + xin

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.s1, self.s2 = Rsu4(3, 8, 16), Rsu4F(16, 8, 16)
            self.side = nn.Conv2d(16, 1, 3, padding=1)

        def forward(self, x):
            h = self.s2(F.max_pool2d(self.s1(x), 2, 2, ceil_mode=True))
            out = F.interpolate(self.side(h), size=x.shape[2:], mode="bilinear")
            return torch.sigmoid(out)

    return Built(Model(), [torch.randn(1, 3, 320, 320)], ["image"])


@builder
def conv_global_pool_14() -> Built:
    """conv -> relu -> a global average pool over the 14x14 map as a plain pooling layer (kernel 14,
    no padding, i.e. VALID) -> linear."""
    torch, nn = _nn()
    return Built(nn.Sequential(nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AvgPool2d(14), nn.Flatten(),
                               nn.Linear(64, 10)), [torch.randn(1, 32, 14, 14)], ["x"])


@builder
def rms_norm_conv_decoder() -> Built:
    """Decoder pieces in the ANE layout [1, 512, 1, 64]: an RMS norm spelt out (mul, reduce_mean, add,
    rsqrt, mul) around 1x1 convs with a SiLU, and a residual add."""
    torch, nn = _nn()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.g = nn.Parameter(torch.ones(1, 512, 1, 1))
            self.up, self.down = nn.Conv2d(512, 1024, 1), nn.Conv2d(1024, 512, 1)

        def forward(self, x):
            h = x * torch.rsqrt((x * x).mean(1, keepdim=True) + 1e-5) * self.g
            return x + self.down(torch.nn.functional.silu(self.up(h)))

    return Built(Model(), [torch.randn(1, 512, 1, 64)], ["x"])


@builder
def unet_split_einsum_block() -> Built:
    """A Stable Diffusion UNet block in the SPLIT_EINSUM layout: conv, group_norm, SiLU, then attention
    on [1, 128, 1, 256] with per-head einsums and softmax over axis 1 (Apple's ml-stable-diffusion)."""
    torch, nn = _nn()
    c, heads = 128, 4

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1)
            self.gn1, self.gn2 = nn.GroupNorm(32, c), nn.GroupNorm(32, c)
            self.q, self.k, self.v, self.o = (nn.Conv2d(c, c, 1) for _ in range(4))

        def forward(self, x):
            h = x + self.conv2(torch.nn.functional.silu(self.gn2(self.conv1(torch.nn.functional.silu(self.gn1(x))))))
            b, _, hh, ww = h.shape
            t = h.view(b, c, 1, hh * ww)  # BC1S
            q, k, v = self.q(t), self.k(t), self.v(t)
            dh = c // heads
            outs = []
            for qi, ki, vi in zip(q.split(dh, 1), k.split(dh, 1), v.split(dh, 1)):
                w = torch.einsum("bchq,bchk->bkhq", qi, ki) / math.sqrt(dh)
                w = torch.softmax(w, dim=1)
                outs.append(torch.einsum("bkhq,bchk->bchq", w, vi))
            return h + self.o(torch.cat(outs, 1)).view(b, c, hh, ww)

    return Built(Model(), [torch.randn(1, c, 16, 16)], ["x"])


@builder
def distilbert_mask_transformers() -> Built:
    """transformers' DistilBertModel (tiny config: width 32, 1 layer, 2 heads, seq 16; random weights)
    with an attention-mask input, as the exporters CLI converts it: the int32 mask becomes bool, is cast
    to float16 and gathered into shape before it masks the scores."""
    torch, nn = _nn()
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64, vocab_size=100,
                              max_position_embeddings=64)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = DistilBertModel(config)

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    return Built(Model(), [torch.randint(0, 100, (1, 16)), torch.ones(1, 16, dtype=torch.long)], ["ids", "mask"])

# ----------------------------------------------------------------------------------------------
# Export (cached) and estimate

def export_key(name: str, precision: str, target: str | None) -> str:
    source = inspect.getsource(BUILDERS[name])
    digest = hashlib.sha256(f"{source}|{precision}|{target}".encode()).hexdigest()[:10]
    return f"{name}-{precision}-{target or 'default'}-{digest}"


FAILED: dict[str, Exception] = {}


def export_model(name: str, precision: str, target: str | None, cache: Path) -> Path:
    """The package for (builder, precision, deployment target), exported once per cache folder (and
    tried once per run: a failure is remembered)."""
    key = export_key(name, precision, target)
    if key in FAILED:
        raise FAILED[key]
    try:
        return _export(name, precision, target, cache / key)
    except Exception as exc:
        FAILED[key] = exc
        raise


def _export(name: str, precision: str, target: str | None, folder: Path) -> Path:
    artifact = folder / "model.mlpackage"
    if artifact.exists():
        return artifact
    import torch

    from mlbench.backends.coreml.export import export_coreml

    torch.manual_seed(0)
    built = BUILDERS[name]()
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    result = export_coreml(built.module.eval(), built.inputs, built.names, precision=precision, optimization=None,
                           deployment_target=target, dest=partial)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return folder / result.artifact.name


def boundary_casts(analysis: Any) -> set[int]:
    """Indexes of the casts coremltools adds at the program boundary: the float16 casts of float32
    inputs before the first other op, and the float32 casts of outputs after the last other op."""
    layers = analysis.layers
    found: set[int] = set()
    for index, layer in enumerate(layers):
        if layer.op_type != "cast" or layer.output_dtype != "fp16":
            break
        found.add(index)
    for index in range(len(layers) - 1, -1, -1):
        if layers[index].op_type != "cast" or layers[index].output_dtype != "fp32":
            break
        found.add(index)
    return found if len(found) < len(layers) else set()


def _types(value: Any) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


def selection_label(clause: dict[str, Any]) -> str:
    label = "/".join(sorted(_types(clause["op_type"]))) if "op_type" in clause else "ops"
    if "output_dtype" in clause:
        label = f"{clause['output_dtype']} {label}"
    return f"{label} {clause['output_shape']}" if "output_shape" in clause else label


def check_clause(clause: dict[str, Any], ops: list[Any], layers: list[Any]) -> tuple[bool, str]:
    """(holds, what the estimate says about it), over the non-boundary ops."""
    devices = [op.device for op in ops]
    counts = Counter(devices)
    total = len(ops)

    def describe(selected: list[int]) -> str:
        by_device = Counter(ops[i].device for i in selected)
        rules = Counter(ops[i].rule or "eligible" for i in selected)
        where = " ".join(f"{SHORT.get(d, d)}{n}" for d, n in by_device.most_common())
        return f"{where} [{', '.join(r for r, _ in rules.most_common())}]"

    if "op_type" in clause or "output_dtype" in clause:
        wanted = _types(clause.get("op_type", ()))
        dtype, shape = clause.get("output_dtype"), clause.get("output_shape")
        selected = [i for i, (op, layer) in enumerate(zip(ops, layers))
                    if (not wanted or op.op_type in wanted) and (dtype is None or layer.output_dtype == dtype)
                    and (shape is None or layer.output_shape == list(shape))]
        label = selection_label(clause)
        if not selected:
            return False, f"{label}: none in the program"
        if "device" in clause:
            ok = all(ops[i].device == clause["device"] for i in selected)
        else:
            ok = all(ops[i].device != clause["not_device"] for i in selected)
        return ok, f"{label}: {describe(selected)}"
    everything = list(range(total))
    if "all_ops" in clause:
        return all(d == clause["all_ops"] for d in devices), f"all: {describe(everything)}"
    if "none_on" in clause:
        return counts[clause["none_on"]] == 0, f"all: {describe(everything)}"
    if "uses" in clause:
        return counts[clause["uses"]] > 0, f"all: {describe(everything)}"
    if "majority" in clause:
        top = counts.most_common(1)[0][0] if counts else None
        return top == clause["majority"] and list(counts.values()).count(counts[top]) == 1, \
            f"all: {describe(everything)}"
    if "min_share" in clause:
        ok = all(counts[d] / total >= f for d, f in clause["min_share"].items()) if total else False
        shares = ", ".join(f"{SHORT[d]} {counts[d] / total:.0%}" for d in clause["min_share"]) if total else "-"
        return ok, f"{shares} of {total}"
    raise ValueError(f"unknown expect clause: {clause}")


def expected_text(clauses: list[dict[str, Any]]) -> str:
    parts = []
    for c in clauses:
        if "op_type" in c or "output_dtype" in c:
            label = selection_label(c)
            parts.append(f"{label} {SHORT[c['device']]}" if "device" in c else f"{label} not {SHORT[c['not_device']]}")
        elif "all_ops" in c:
            parts.append(f"all {SHORT[c['all_ops']]}")
        elif "none_on" in c:
            parts.append(f"none {SHORT[c['none_on']]}")
        elif "uses" in c:
            parts.append(f"some {SHORT[c['uses']]}")
        elif "majority" in c:
            parts.append(f"most {SHORT[c['majority']]}")
        elif "min_share" in c:
            parts.append(", ".join(f"{SHORT[d]} ≥{f:.0%}" for d, f in c["min_share"].items()))
    return "; ".join(parts)


@dataclass
class Outcome:
    entry: dict[str, Any]
    agree: bool | None  # None: the model could not be built, exported or estimated
    estimated: str
    boundary: str
    seconds: float


def evaluate(entry: dict[str, Any], cache: Path, dump: bool) -> Outcome:
    from mlbench.backends.apple.analysis import analyse_package
    from mlbench.backends.apple.placement import estimate_placement

    started = time.perf_counter()
    clauses = entry["expect"] if isinstance(entry["expect"], list) else [entry["expect"]]
    analysis = None
    try:
        artifact = export_model(entry["model"], entry.get("precision", "float16"), entry.get("deployment_target"), cache)
        analysis = analyse_package(artifact)
        placement = estimate_placement(analysis, entry["compute_units"])
    except Exception as exc:  # noqa: BLE001 - a report: one failed entry must not stop the others
        stage = "export" if analysis is None else "estimate"
        message = " ".join(str(exc).split())[:160]
        if dump and analysis is not None:
            print(f"--- {entry['id']}: the estimate failed; the ops:")
            for layer in analysis.layers:
                print(f"    {layer.op_type:32s} {layer.output_dtype or '-':5s} {layer.output_shape}")
        return Outcome(entry, None, f"{stage} error: {type(exc).__name__}: {message}", "",
                       time.perf_counter() - started)
    skip = boundary_casts(analysis)
    ops = [op for i, op in enumerate(placement.ops) if i not in skip]
    layers = [layer for i, layer in enumerate(analysis.layers) if i not in skip]
    results = [check_clause(c, ops, layers) for c in clauses]
    boundary = " ".join(f"{SHORT.get(placement.ops[i].device)}" for i in sorted(skip))
    if dump:
        print(f"--- {entry['id']} ({entry['model']}, {entry['compute_units']}, {analysis.precision})")
        for i, (layer, op) in enumerate(zip(analysis.layers, placement.ops)):
            mark = " (boundary)" if i in skip else ""
            print(f"    {layer.op_type:32s} {layer.output_dtype or '-':5s} {layer.output_shape!s:24s} "
                  f"{SHORT.get(op.device, op.device):4s} {op.rule or ''}{mark}")
    texts = list(dict.fromkeys(text for _, text in results))  # clauses over all ops describe them once
    return Outcome(entry, all(ok for ok, _ in results), "; ".join(texts), boundary,
                   time.perf_counter() - started)


def load_observations() -> list[dict[str, Any]]:
    import yaml

    return yaml.safe_load(OBSERVATIONS.read_text(encoding="utf-8"))["observations"]


def print_table(outcomes: list[Outcome]) -> None:
    print()
    for o in outcomes:
        e = o.entry
        verdict = {True: "yes", False: "NO", None: "error"}[o.agree]
        weight = " (weight: low)" if e.get("weight") == "low" else ""
        clauses = e["expect"] if isinstance(e["expect"], list) else [e["expect"]]
        print(f"[{e['id']}] agree: {verdict}{weight}   ({e['model']}, {e['compute_units']}, "
              f"{e.get('precision', 'float16')}{', ' + e['deployment_target'] if e.get('deployment_target') else ''};"
              f" {o.seconds:.1f} s)")
        print(f"    observed:  {' '.join(e['observation'].split())}")
        print(f"    expected:  {expected_text(clauses)}")
        print(f"    estimated: {o.estimated}" + (f"   (boundary casts: {o.boundary})" if o.boundary else ""))
        print(f"    source:    {e['source']}")
    print()
    width = max(len(o.entry["id"]) for o in outcomes)
    print(f"{'id':{width}s}  agree  {'expected':42s}  estimated")
    for o in outcomes:
        verdict = {True: "yes", False: "NO", None: "error"}[o.agree]
        low = "*" if o.entry.get("weight") == "low" else " "
        clauses = o.entry["expect"] if isinstance(o.entry["expect"], list) else [o.entry["expect"]]
        print(f"{o.entry['id']:{width}s}{low} {verdict:5s}  {expected_text(clauses)[:42]:42s}  {o.estimated[:90]}")
    print("(* weight: low)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="ID", help="run only this entry (repeatable)")
    parser.add_argument("--cache", type=Path, help="keep exported packages here (default: a temporary folder)")
    parser.add_argument("--dump", action="store_true", help="print every op with its estimated device and rule")
    args = parser.parse_args(argv)

    entries = load_observations()
    if args.only:
        unknown = set(args.only) - {e["id"] for e in entries}
        if unknown:
            print(f"no such id: {', '.join(sorted(unknown))}", file=sys.stderr)
            return 0
        entries = [e for e in entries if e["id"] in args.only]
    temporary = None
    if args.cache is None:
        temporary = tempfile.TemporaryDirectory(prefix="mlbench-placement-sources-")
        cache = Path(temporary.name)
    else:
        cache = args.cache
        cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        outcomes = []
        for entry in entries:
            outcome = evaluate(entry, cache, args.dump)
            print(f"  {entry['id']}: {({True: 'agrees', False: 'disagrees', None: 'error'})[outcome.agree]}"
                  f" ({outcome.seconds:.1f} s)", file=sys.stderr, flush=True)
            outcomes.append(outcome)
    finally:
        if temporary is not None:
            temporary.cleanup()
    print_table(outcomes)
    agreed = sum(1 for o in outcomes if o.agree)
    weighted = [o for o in outcomes if o.entry.get("weight") != "low"]
    errors = sum(1 for o in outcomes if o.agree is None)
    print(f"\nagreement: {agreed} of {len(outcomes)}"
          + (f" ({errors} could not be estimated)" if errors else ""))
    print(f"agreement without the low-weight observations: {sum(1 for o in weighted if o.agree)} of {len(weighted)}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
