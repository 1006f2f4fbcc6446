"""`localspec train-drafter` (`train-eagle`): distil an EAGLE-1 head (with --layout eagle3 an EAGLE-3 head,
eagle3_train.py; dflash, dflash_train.py; with --kind medusa|mlp Medusa heads or an MLP speculator,
multihead_train.py) for a local model from its own hidden states. This module holds the training run all
of them share and the EAGLE-1 head.

The target (torch backend) reads the corpus once; its last-layer features f_j (what its LM head reads) are
kept in memory. The head learns, at every position j, to predict f_{j+1} from (embedding of token j+1, f_j)
with a causal attention layer over the sequence, as in EAGLE-1: a smooth-L1 loss on the feature plus
0.1 x the cross-entropy between the target's next-token distribution softmax(W f_{j+1}) and the head's
softmax(W f^_{j+1}) through the target's own (frozen) LM head W. Uniform noise on the input features makes
the head tolerate its own, imperfect features when it drafts several tokens.

The result is a folder in the published EAGLE-1 layout (config.json + model.safetensors), so
`--drafter eagle --eagle-head DIR` loads it like a downloaded head. Work is saved every few minutes and on
Ctrl-C, so an interrupted run keeps what it learnt.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from localspec.errors import ConfigError
from localspec.train.save import EAGLE_LAYER_NAMES, head_config

REG_WEIGHT, CLS_WEIGHT = 1.0, 0.1  # EAGLE-1's loss weights
SAVE_EVERY_S = 300.0


@dataclass
class TrainConfig:
    minutes: float = 30.0  # wall-clock budget for the whole run, feature extraction included
    max_steps: int = 0  # stop after this many optimiser steps (0: epochs and minutes decide): a budget in work
    epochs: int = 8
    seq_len: int = 512
    lr: float = 1e-3
    noise: float = 0.2  # features get uniform noise in [-noise/2, noise/2] (EAGLE-1's setting)
    holdout: float = 0.05
    seed: int = 0
    max_tokens: int = 0  # use at most this many corpus tokens (0: all)
    layout: str = "eagle1"  # eagle1 (this module's head), eagle3 (eagle3_train.py), dflash (dflash_train.py),
    # medusa or mlp (multihead_train.py)


def read_corpus(path: Path, tokenize: Callable[[list], list], tokenize_text: Callable[[str], list]) -> list[list[int]]:
    """Token sequences of a corpus: .jsonl lines with "messages" (rendered with the chat template) or "text",
    or a plain text file (documents separated by blank lines)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such corpus file")
    text = path.read_text(encoding="utf-8", errors="replace")
    seqs = []
    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise ConfigError(f"{path}:{number}: not JSON ({exc})") from exc
            if isinstance(item, dict) and isinstance(item.get("messages"), list):
                seqs.append(tokenize(item["messages"]))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                seqs.append(tokenize_text(item["text"]))
            else:
                raise ConfigError(f'{path}:{number}: expected an object with "messages" or "text"')
    else:
        seqs = [tokenize_text(doc) for doc in text.split("\n\n") if doc.strip()]
    seqs = [s for s in seqs if len(s) >= 8]
    if not seqs:
        raise ConfigError(f"{path}: no usable text (every entry is shorter than 8 tokens)")
    return seqs


def chunk(seqs: Sequence[Sequence[int]], seq_len: int) -> list[list[int]]:
    """Sequences cut into windows of at most seq_len tokens; pieces under 8 tokens are dropped."""
    out = []
    for s in seqs:
        for i in range(0, len(s), seq_len):
            piece = list(s[i : i + seq_len])
            if len(piece) >= 8:
                out.append(piece)
    return out


class TrainHead:
    """An EAGLE-1 head as trainable modules: fc over [embedding; feature] and one Llama layer without input norm."""

    feature_layers = (-1,)  # the last layer's normed output, what the target's LM head reads

    def __init__(self, target_model, seed: int) -> None:
        import torch
        from torch import nn

        from localspec.backends.torch.decoder import Decoder, DecoderConfig

        torch.manual_seed(seed)
        t = target_model.cfg
        self.cfg = DecoderConfig(
            t.vocab_size,
            t.hidden_size,
            t.intermediate_size,
            1,
            t.n_heads,
            t.n_kv_heads,
            t.head_dim,
            rms_eps=t.rms_eps,
            rope_theta=t.rope_theta,
            rope_scaling=t.rope_scaling,
            tie_embeddings=True,
            max_positions=t.max_positions,
        )
        self.layer_model = Decoder(self.cfg)
        self.layer_model.embed = None  # the target's embedding is used, frozen
        self.layer_model.layers[0].attn_norm = nn.Identity()
        self.layer_model.norm = nn.Identity()
        h = t.hidden_size
        self.fc = nn.Linear(2 * h, h, bias=True)
        with torch.no_grad():  # start as "the next feature is the current one" plus a little of the token
            self.fc.weight[:, :h].mul_(0.1)
            self.fc.weight[:, h:].copy_(torch.eye(h))
            self.fc.bias.zero_()
            layer = self.layer_model.layers[0]
            layer.o.weight.mul_(0.1)
            layer.down.weight.mul_(0.1)
        # frozen, on the CPU in fp32 like the rest of the head (the target may sit on a GPU in bf16)
        self.embed = target_model.embed.weight.detach().float().cpu()
        self.lm_head = (
            (target_model.embed.weight if target_model.lm_head is None else target_model.lm_head.weight)
            .detach()
            .float()
            .cpu()
        )

    def parameters(self):
        return [*self.fc.parameters(), *self.layer_model.layers.parameters()]

    def target_data(self, backend, piece: Sequence[int]):
        """The target's last-layer features [n, H] of one window (what the head learns to predict)."""
        import torch

        return torch.from_numpy(backend.prefill_features(piece))

    def loss(self, tokens, feats, noise: float, rng) -> tuple:
        return losses(self, tokens, feats, noise, rng)

    def predict(self, tokens, features):
        """Predicted features [n, H] for inputs (token j+1, feature j)."""
        import torch

        x = self.fc(torch.cat([self.embed[tokens], features], dim=-1))
        return self.layer_model._layers(x, 0)[0]

    def state_dict(self) -> dict:
        state = {"fc.weight": self.fc.weight, "fc.bias": self.fc.bias}
        layer = self.layer_model.layers[0]
        for ours, theirs in EAGLE_LAYER_NAMES.items():
            state[f"layers.0.{theirs}.weight"] = getattr(layer, ours).weight
        return {k: v.detach().contiguous().clone() for k, v in state.items()}

    def config(self) -> dict:
        return head_config(self.cfg, "LlamaForCausalLM", vocab_size=self.cfg.vocab_size, bias=True)


def losses(head: TrainHead, tokens, feats, noise: float, rng) -> tuple:
    """(loss, top-1 agreement count, positions) on one sequence; feats [n, H] are the target's."""
    import torch
    import torch.nn.functional as F

    inputs = feats[:-1]
    if noise > 0:
        inputs = inputs + (torch.rand(inputs.shape, generator=rng) - 0.5) * noise
    pred = head.predict(tokens[1:], inputs)
    want = feats[1:]
    reg = F.smooth_l1_loss(pred, want)
    with torch.no_grad():
        teacher = torch.softmax(want @ head.lm_head.T, dim=-1)
    student = torch.log_softmax(pred @ head.lm_head.T, dim=-1)
    cls = -(teacher * student).sum(-1).mean()
    agree = int((student.argmax(-1) == teacher.argmax(-1)).sum())
    return REG_WEIGHT * reg + CLS_WEIGHT * cls, agree, len(want)


def train_eagle(backend, data: Path, out: Path, config: TrainConfig, log: Callable[[str], None] = print) -> dict:
    """Train a head for the torch backend's model on the corpus; write it to ``out``; return the report."""
    import torch

    started = time.perf_counter()
    deadline = started + config.minutes * 60
    pieces, n_val = _training_windows(backend, data, config, log)
    total_tokens = sum(map(len, pieces))
    head = _new_head(backend, config)
    features = _target_features(backend, head, pieces, log, started)
    if config.layout in ("eagle3", "dflash"):
        from localspec.train.eagle3 import draft_vocabulary

        head.choose_vocabulary(
            draft_vocabulary([f[1] for f in features.values()], sorted(backend.tokenizer.eog_tokens))
        )
    ids = {i: torch.tensor(p, dtype=torch.long) for i, p in enumerate(pieces)}
    val_idx, train_idx = list(range(n_val)), list(range(n_val, len(pieces))) or list(range(len(pieces)))
    gen = torch.Generator().manual_seed(config.seed)

    def evaluate() -> tuple[float, float]:
        return _evaluate(head, [(ids[i], features[i]) for i in val_idx], gen, report)

    report: dict = {}
    v_loss, v_acc = evaluate()
    log(f"before training: held-out loss {v_loss:.3f}, top-1 agreement with the target {v_acc:.3f}{_stages(report)}")
    report.update(
        {
            "corpus": str(data),
            "layout": config.layout,
            "windows": len(pieces),
            "tokens": total_tokens,
            "start_val_loss": v_loss,
            "start_val_top1": v_acc,
            "start_val_top1_per_stage": report.get("val_top1_per_stage"),
            "history": [],
        }
    )
    run = _Training(head, config, gen, deadline, len(train_idx), log)
    try:
        for epoch in range(config.epochs):
            batch = train_idx[:]
            run.order.shuffle(batch)
            for i in batch:
                if not run.step(epoch, ids[i], features[i]):
                    raise StopIteration
                run.save_now(out, report)
            v_loss, v_acc = evaluate()
            report["history"].append({"epoch": epoch + 1, "step": run.steps, "val_loss": v_loss, "val_top1": v_acc})
            log(f"epoch {epoch + 1} done: held-out loss {v_loss:.3f}, top-1 agreement {v_acc:.3f}{_stages(report)}")
    except StopIteration:
        pass
    except KeyboardInterrupt:
        run.interrupted = True
        log("interrupted: saving what was learnt so far")
    v_loss, v_acc = evaluate()
    report.update(
        steps=run.steps,
        train_tokens_seen=run.seen,
        val_loss=v_loss,
        val_top1=v_acc,
        interrupted=run.interrupted,
        seconds=round(time.perf_counter() - started, 1),
    )
    save_head(head, out, report)
    log(
        f"held-out top-1 agreement {report['start_val_top1']:.3f} -> {v_acc:.3f}{_stages(report)} after "
        f"{run.steps} steps ({report['seconds'] / 60:.1f} min); head written to {out}"
    )
    if run.interrupted:
        raise KeyboardInterrupt
    return report


def _evaluate(head, windows: list, gen, report: dict) -> tuple[float, float]:
    """Held-out (loss, top-1 agreement with the target); a multi-stage head's (Medusa, MLP) agreement per
    stage goes to report["val_top1_per_stage"], its first stage's is returned."""
    import torch

    loss_sum, agree, n = 0.0, np.zeros(1), 0
    with torch.no_grad():
        for tokens, data in windows:
            loss, a, m = head.loss(tokens, data, 0.0, gen)
            loss_sum, agree, n = loss_sum + float(loss) * m, agree + np.atleast_1d(a), n + m
    per_stage = [round(float(x), 4) for x in agree / max(n, 1)]
    if len(per_stage) > 1:
        report["val_top1_per_stage"] = per_stage
    return (loss_sum / max(n, 1), per_stage[0])


def _stages(report: dict) -> str:
    """A multi-stage head's held-out agreement per stage, for the log ('' for one stage)."""
    per_stage = report.get("val_top1_per_stage")
    return f" (per stage: {' '.join(f'{x:.3f}' for x in per_stage)})" if per_stage else ""


def _training_windows(backend, data: Path, config: TrainConfig, log) -> tuple[list[list[int]], int]:
    """The corpus cut into windows, shuffled, at most config.max_tokens of them: (windows, held-out count);
    the first windows are held out."""
    seqs = read_corpus(
        data,
        lambda m: backend.tokenizer.chat_tokens(m, add_generation_prompt=False),
        lambda t: backend.tokenizer.tokenize(t),
    )
    pieces = chunk(seqs, min(config.seq_len, backend.n_ctx))
    random.Random(config.seed).shuffle(pieces)
    if config.max_tokens:
        kept, total = [], 0
        for p in pieces:
            if total >= config.max_tokens:
                break
            kept.append(p)
            total += len(p)
        pieces = kept
    n_val = max(1, int(len(pieces) * config.holdout)) if len(pieces) > 1 else 0
    n_train = len(pieces) - n_val or len(pieces)
    log(
        f"corpus: {len(seqs)} entries -> {n_train} training and {n_val} held-out windows, "
        f"{sum(map(len, pieces))} tokens"
    )
    return pieces, n_val


LAYOUTS = ("eagle1", "eagle3", "dflash", "medusa", "mlp")


def _new_head(backend, config: TrainConfig):
    if config.layout == "eagle1":
        return TrainHead(backend.model, config.seed)
    if config.layout in ("medusa", "mlp"):
        from localspec.train.multihead import MedusaTrainHead, MlpTrainHead

        return (MedusaTrainHead if config.layout == "medusa" else MlpTrainHead)(backend.model, config.seed)
    if config.layout == "dflash":
        from localspec.train.dflash import DFlashTrainHead

        return DFlashTrainHead(backend.model, config.seed)
    if config.layout != "eagle3":
        raise ConfigError(f"the head layout must be one of {', '.join(LAYOUTS)}, not {config.layout!r}")
    from localspec.drafters.eagle.checkpoint import eagle3_layers
    from localspec.train.eagle3 import Eagle3TrainHead

    return Eagle3TrainHead(backend.model, eagle3_layers({}, backend.model.cfg.n_layers), config.seed)


def _target_features(backend, head, pieces: list[list[int]], log, started: float) -> dict:
    """What the head learns from, for every window (``head.target_data``)."""
    features = {}
    backend.set_feature_layers(head.feature_layers)
    for i, piece in enumerate(pieces):
        backend.truncate(0)
        features[i] = head.target_data(backend, piece)
        if (i + 1) % 50 == 0 or i + 1 == len(pieces):
            log(f"target features: {i + 1}/{len(pieces)} windows ({time.perf_counter() - started:.0f} s)")
    backend.truncate(0)
    return features


class _Training:
    """The optimiser and its schedule: warm-up, then cosine over the steps the time budget allows."""

    def __init__(self, head: TrainHead, config: TrainConfig, gen, deadline: float, n_train: int, log) -> None:
        import torch

        self.head, self.config, self.gen, self.deadline, self.log = head, config, gen, deadline, log
        self.params = head.parameters()
        for p in self.params:
            p.requires_grad_(True)
        self.opt = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        self.order = random.Random(config.seed + 1)
        self.full = config.epochs * n_train
        if config.max_steps > 0:
            self.full = min(self.full, config.max_steps)
        self.steps_max, self.steps, self.seen, self.interrupted = self.full, 0, 0, False
        self.started = self.last_save = time.perf_counter()

    def step(self, epoch: int, ids, features) -> bool:
        """One optimiser step on a window; False when the time or step budget is spent."""
        import torch

        now = time.perf_counter()
        if self.steps >= 8:  # the total number of steps the budget allows, at the speed so far
            per_step = (now - self.started) / self.steps
            self.steps_max = min(self.full, self.steps + int((self.deadline - now) / per_step))
        if now >= self.deadline or self.steps >= self.steps_max:
            return False
        warmup = min(1.0, (self.steps + 1) / 20)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, self.steps / max(self.steps_max, 1))))
        for g in self.opt.param_groups:
            g["lr"] = self.config.lr * warmup * cosine
        loss, agree, n = self.head.loss(ids, features, self.config.noise, self.gen)
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 0.5)
        self.opt.step()
        self.steps, self.seen = self.steps + 1, self.seen + n
        if self.steps % 25 == 0:
            rate = self.seen / (time.perf_counter() - self.started)
            top1 = np.atleast_1d(agree)[0] / max(n, 1)  # a multi-stage head's first stage
            self.log(
                f"epoch {epoch + 1} step {self.steps}/{self.steps_max}: loss {float(loss.detach()):.3f}, "
                f"top-1 {top1:.3f}, {rate:.0f} tok/s, {(self.deadline - time.perf_counter()) / 60:.1f} min left"
            )
        return True

    def save_now(self, out: Path, report: dict) -> None:
        """Save the head every SAVE_EVERY_S, so that a crash loses little."""
        if time.perf_counter() - self.last_save > SAVE_EVERY_S:
            save_head(self.head, out, report)
            self.last_save = time.perf_counter()


def save_head(head: TrainHead, out: Path, report: dict) -> None:
    """Write the head atomically (a crash mid-write leaves the previous save intact)."""
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    weights = getattr(head, "weights_file", "model.safetensors")
    tmp = out / (weights + ".tmp")
    save_file(head.state_dict(), str(tmp), metadata={"format": "pt", "producer": "localspec train-drafter"})
    os.replace(tmp, out / weights)
    for name, obj in (("config.json", head.config()), ("train_report.json", report)):
        (out / (name + ".tmp")).write_text(json.dumps(obj, indent=1), encoding="utf-8")
        os.replace(out / (name + ".tmp"), out / name)


def run_train_eagle(args, log: Callable[[str], None] = print) -> dict:
    from localspec.backends.torch.backend import TorchBackend
    from localspec.models.registry import load_registry, resolve_model

    if not Path(args.data).is_file():  # before the (slow) model load
        raise ConfigError(f"{args.data}: no such corpus file")
    _, path = resolve_model(args.model, load_registry(), backend="torch")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not (out / "config.json").exists():
        raise ConfigError(f"{out} exists and is not a head folder (no config.json); pick an empty or new --out")
    backend = TorchBackend(path, n_ctx=max(args.seq_len, 64), n_threads=args.threads)
    try:
        config = TrainConfig(
            minutes=args.minutes,
            max_steps=args.max_steps,
            epochs=args.epochs,
            seq_len=args.seq_len,
            lr=args.lr,
            seed=args.seed or 0,
            max_tokens=args.max_corpus_tokens,
            layout=args.layout if getattr(args, "kind", "eagle") == "eagle" else args.kind,
        )
        return train_eagle(backend, Path(args.data), out, config, log)
    finally:
        backend.close()
