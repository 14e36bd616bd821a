"""A character-level transformer trained on Python's own standard library source: a model
and data a user would recognise, built from what every Python installation ships (nothing
is downloaded). The task entry Alchemist calls is `make_task` (examples/charlm.yaml):

    alchemist run examples/charlm.yaml                        # sync SGD, 2 workers
    alchemist run examples/charlm.yaml --set algorithm.name=bmuf

It returns the model, the train and test sets (windows of text, next character as target)
and the loss; accuracy (of the next character) comes by default, bits per character from
`metrics`. Everything else (sharding, the algorithm, checkpoints, metrics) is Alchemist's.
"""

import math
import sysconfig
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset

# Modules of the standard library whose source is the corpus (about 300 KB of text).
SOURCES = ("textwrap", "string", "argparse", "dataclasses", "functools", "json/decoder",
           "json/encoder", "shlex", "fractions", "heapq", "bisect", "calendar")
CONTEXT = 64  # characters the model sees
VOCAB = 128  # ASCII; anything else becomes '?'


def corpus() -> torch.Tensor:
    lib = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join((lib / f"{name}.py").read_text(encoding="utf-8") for name in SOURCES)
    return torch.tensor([b if b < VOCAB else ord("?") for b in text.encode()], dtype=torch.long)


class Windows(Dataset):
    """Non-overlapping windows of CONTEXT characters; the target is the text shifted by one."""

    def __init__(self, text: torch.Tensor):
        self.text = text
        self.count = (len(text) - 1) // CONTEXT

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        chunk = self.text[i * CONTEXT:(i + 1) * CONTEXT + 1]
        return chunk[:-1], chunk[1:]


class CharTransformer(nn.Module):
    def __init__(self, width: int = 128, layers: int = 2, heads: int = 4):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.randn(CONTEXT, width) * 0.02)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(CONTEXT),
                             persistent=False)

    def forward(self, x):
        h = self.embed(x) + self.position[: x.shape[1]]
        h = self.blocks(h, mask=self.causal[: x.shape[1], : x.shape[1]], is_causal=True)
        return self.head(h)  # (batch, characters, VOCAB): the next character's scores


def loss(outputs, targets):
    return F.cross_entropy(outputs.reshape(-1, VOCAB), targets.reshape(-1))


def metrics(outputs, targets):
    return {"bits_per_char": loss(outputs, targets).item() / math.log(2)}


def make_task(ctx):
    text = corpus()
    cut = int(len(text) * 0.9)  # the last tenth of the text is held out
    return dict(model=CharTransformer(), train=Windows(text[:cut]), test=Windows(text[cut:]),
                loss=loss, metrics=metrics)
