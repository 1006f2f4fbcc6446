"""The GPU check: what the torch backend does on this machine's GPU, in one run anyone with CUDA can make.

Needs only Python, torch and transformers' dependencies (numpy, safetensors); the torch backend imports
without textual, llama-cpp-python or mlx. Models are built with random weights in real shapes, on the
device: the Llama-3.1-8B configuration in bf16 and an EAGLE-3 head of its width (decode speed does not
depend on the weights' values). Measured:

- plain decoding through the generate loop (tok/s), next to the same steps' bare forward passes: the
  loop's overhead per step (verification, bookkeeping) is the difference;
- the memory-bandwidth bound of plain decoding: the weights' bytes over this device's measured copy
  bandwidth, and the share of it reached;
- the verify-cost curve: a chain window of k tokens, and a tree of k nodes, k = 1..64, against one step;
- EAGLE-3 drafting cost per step at K = 4, chains and trees of 8 nodes;
- tests/backends/torch/test_cuda.py, run by pytest.

Plain decoding and the verify curves are measured twice: with the ordinary eager step, and with the
fixed-shape step captured as CUDA graphs (backends/torch_graphs.py; run eagerly where there is no CUDA).
EAGLE-3's figures are eager: steps that hand out hidden states are not captured.

    python benchmarks/gpu_check.py OUT_DIR            # on a CUDA GPU, about 2-4 minutes on an H100/H200
    python benchmarks/gpu_check.py OUT_DIR --tiny     # tiny shapes on whatever device there is (CPU: make test)

Writes OUT_DIR/gpu-check.json and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from localspec.backends.tokenizer import Tokenizer  # noqa: E402
from localspec.backends.torch.backend import TorchBackend  # noqa: E402
from localspec.backends.torch.decoder import Decoder, DecoderConfig  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.eagle.drafter import EagleDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.train.save import head_config  # noqa: E402

LLAMA31_8B = DecoderConfig(
    vocab_size=128256,
    hidden_size=4096,
    intermediate_size=14336,
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    head_dim=128,
    rope_theta=500000.0,
    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    max_positions=131072,
)
TINY = DecoderConfig(
    vocab_size=512, hidden_size=64, intermediate_size=128, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16
)
FULL_RUN = {"ctx": 4096, "prompt": 512, "tokens": 256, "repeats": 10, "ks": list(range(1, 65)), "draft_vocab": 32000}
TINY_RUN = {"ctx": 512, "prompt": 32, "tokens": 24, "repeats": 2, "ks": [1, 2, 4, 8, 16], "draft_vocab": 64}
GREEDY = SamplingParams(temperature=0)


class RandomTokens(Tokenizer):
    """The tokenizer a random model needs: no text, no end of turn."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size, self.model_name = vocab_size, "random"

    def token_bytes(self, token: int) -> bytes:
        return b"."


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device, fn, repeats: int) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, after one warm-up run."""
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def build_target(cfg: DecoderConfig, device, dtype, ctx: int) -> TorchBackend:
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Decoder(cfg)
    finally:
        torch.set_default_dtype(previous)
    return TorchBackend.from_decoder(model, RandomTokens(cfg.vocab_size), n_ctx=ctx, steps="off")


def copy_bandwidth(device) -> float:
    """Bytes per second of a device-to-device copy (read + write), the bound a decode step's weight reads meet."""
    n = (1 << 30) if device.type == "cuda" else (1 << 26)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * n / timed(device, lambda: dst.copy_(src), 5)


def plain_decode(backend: TorchBackend, prompt: list[int], tokens: int, device, rounds: int = 3) -> dict:
    """Plain decoding through the generate loop and the same number of bare forward steps, in alternating
    rounds (medians): the loop's overhead is the difference per step."""
    token = [int(prompt[-1])]

    def bare():  # the forward and waiting for it, as a step waits for its argmax
        backend.forward(token)
        sync(device)
        backend.truncate(len(prompt))

    backend.truncate(0)
    generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=8)  # warm-up
    loops, forwards, rates = [], [], []
    for _ in range(rounds):
        backend.truncate(0)
        out = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=tokens)
        loops.append(out.stats.decode_s / out.stats.steps)
        rates.append(out.stats.generated / out.stats.decode_s)
        backend.truncate(len(prompt))
        start = time.perf_counter()
        for _ in range(out.stats.steps):
            bare()
        forwards.append((time.perf_counter() - start) / out.stats.steps)
    loop_step, forward_step = float(np.median(loops)), float(np.median(forwards))
    return {
        "tok_s": float(np.median(rates)),
        "loop_ms_per_step": 1e3 * loop_step,
        "forward_ms_per_step": 1e3 * forward_step,
        "overhead_ms_per_step": 1e3 * (loop_step - forward_step),
    }


def verify_curve(backend: TorchBackend, prompt: list[int], ks: list[int], repeats: int, device) -> dict:
    rng = np.random.default_rng(0)
    chain, tree = {}, {}
    keep = len(prompt)
    for k in ks:
        window = [int(t) for t in rng.integers(backend.vocab_size, size=k)]
        parents = [-1] + [int(rng.integers(-1, i)) for i in range(1, k - 1)] if k > 1 else []

        def run_chain(window=window):
            backend.forward(window)
            backend.truncate(keep)

        def run_tree(window=window, parents=parents):
            backend.forward_tree(window, parents)
            backend.accept_path([])
            backend.truncate(keep)

        chain[k] = 1e3 * timed(device, run_chain, repeats)
        tree[k] = 1e3 * timed(device, run_tree, repeats)
    one = chain[ks[0]]
    return {
        "chain_ms": chain,
        "tree_ms": tree,
        "chain_x_step": {k: v / one for k, v in chain.items()},
        "tree_x_step": {k: v / one for k, v in tree.items()},
    }


def write_eagle3_head(folder: Path, cfg: DecoderConfig, draft_vocab: int, dtype) -> None:
    """A random EAGLE-3 head in the released layout (fc over three layers' features, one midlayer over 2H,
    a draft vocabulary with d2t offsets and t2d), written as safetensors."""
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(1)
    h, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    kept = torch.sort(torch.randperm(cfg.vocab_size, generator=g)[:draft_vocab]).values
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    t2d[kept] = True
    state = {
        "fc.weight": rand(h, 3 * h),
        "midlayer.hidden_norm.weight": torch.ones(h, dtype=dtype),
        "midlayer.input_layernorm.weight": torch.ones(h, dtype=dtype),
        "midlayer.post_attention_layernorm.weight": torch.ones(h, dtype=dtype),
        "midlayer.self_attn.q_proj.weight": rand(cfg.n_heads * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": rand(cfg.n_kv_heads * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(cfg.n_kv_heads * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": rand(h, cfg.n_heads * hd),
        "midlayer.mlp.gate_proj.weight": rand(inter, h),
        "midlayer.mlp.up_proj.weight": rand(inter, h),
        "midlayer.mlp.down_proj.weight": rand(h, inter),
        "norm.weight": torch.ones(h, dtype=dtype),
        "lm_head.weight": rand(draft_vocab, h),
        "d2t": kept - torch.arange(draft_vocab),
        "t2d": t2d,
    }
    config = head_config(cfg, "LlamaForCausalLMEagle3", vocab_size=cfg.vocab_size, draft_vocab_size=draft_vocab)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))


def eagle_cost(backend: TorchBackend, head: Path, prompt: list[int], tokens: int) -> dict:
    """Drafting time per drafting step at K = 4: chains, and trees of 8 nodes (a random head: its drafts
    are rejected, which leaves the cost of making them)."""
    figures = {}
    for name, nodes in (("chain", 0), ("tree8", 8)):
        backend.truncate(0)
        out = generate(
            backend, EagleDrafter(backend, head, tree_nodes=nodes), prompt, GREEDY, max_tokens=tokens, draft_tokens=4
        )
        drafting = max(out.stats.steps, 1)
        figures[name] = {
            "draft_ms_per_step": 1e3 * out.stats.draft_s / drafting,
            "verify_ms_per_step": 1e3 * out.stats.verify_s / drafting,
            "tok_s": out.stats.generated / out.stats.decode_s,
        }
    backend.set_feature_layers((-1,))
    return figures


def run_cuda_tests() -> dict:
    try:
        import pytest  # noqa: F401
    except ImportError:
        return {"ran": False, "why": "pytest is not installed"}
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(ROOT / "tests" / "backends" / "torch" / "test_cuda.py"),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        return {"ran": True, "rc": None, "summary": "timed out after 300 s"}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return {"ran": True, "rc": done.returncode, "summary": lines[-1] if lines else done.stderr[-300:]}


def table(report: dict) -> str:
    rows = [f"device       {report['device']} ({report['dtype']}, {report['shape']}; {report['graphs_note']})"]
    for mode, fig in report["modes"].items():
        plain, curve = fig["plain"], fig["verify"]
        rows += [
            f"[{mode}]",
            f"plain        {plain['tok_s']:.1f} tok/s, {100 * fig['bandwidth_share']:.0f}% of the bandwidth bound "
            f"({report['bound_tok_s']:.1f} tok/s)",
            f"overhead     {plain['overhead_ms_per_step']:.3f} ms per step "
            f"(loop {plain['loop_ms_per_step']:.3f}, forward {plain['forward_ms_per_step']:.3f})",
        ]
        for k in (k for k in (2, 4, 8, 16, 32, 64) if k in curve["chain_x_step"]):
            chain, tree = curve["chain_x_step"][k], curve["tree_x_step"][k]
            rows.append(f"window k={k:<3}  chain {chain:.2f}x a step, tree {tree:.2f}x")
    for name, fig in report["eagle3"].items():
        rows.append(f"eagle3 {name:<6} {fig['draft_ms_per_step']:.2f} ms drafting per step at K=4 (eager)")
    tests = report["tests"]
    rows.append(f"test_cuda    {tests.get('summary', tests.get('why'))}")
    return "\n".join(rows)


def measure(backend, prompt: list[int], run: dict, device, bound: float) -> dict:
    plain = plain_decode(backend, prompt, run["tokens"], device)
    backend.truncate(0)
    backend.prefill(prompt)
    verify = verify_curve(backend, prompt, run["ks"], run["repeats"], device)
    return {"plain": plain, "verify": verify, "bandwidth_share": plain["tok_s"] / bound}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for gpu-check.json")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU run: seconds)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda when there is one, else cpu)")
    ap.add_argument("--no-tests", action="store_true", help="do not run tests/backends/torch/test_cuda.py")
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    run, cfg = (TINY_RUN, TINY) if args.tiny else (FULL_RUN, LLAMA31_8B)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    started = time.perf_counter()
    backend = build_target(cfg, device, dtype, run["ctx"])
    weights = sum(p.numel() * p.element_size() for p in backend.model.parameters())
    bandwidth = copy_bandwidth(device)
    bound = bandwidth / weights
    prompt = [int(t) for t in np.random.default_rng(1).integers(cfg.vocab_size, size=run["prompt"])]
    modes = {"eager": measure(backend, prompt, run, device, bound)}
    # the fixed-shape step: captured as CUDA graphs on a GPU; elsewhere run eagerly, which exercises its code
    backend.set_steps("graphs" if device.type == "cuda" else "eager")
    if backend.steps is not None:
        name = "graphs" if backend.steps.captured else "fixed-shape eager"
        modes[name] = measure(backend, prompt, run, device, bound)
    graphs_note = backend.info.placement.partition(" · ")[2] or "no CUDA graphs on this device"
    capture_s = backend.steps.capture_s if backend.steps is not None and backend.steps.captured else None
    backend.set_steps("off")
    head = args.out / "eagle3-head"
    write_eagle3_head(head, cfg, run["draft_vocab"], dtype)
    eagle = eagle_cost(backend, head, prompt, run["tokens"])
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "shape": "tiny" if args.tiny else "Llama-3.1-8B",
        "graphs_note": graphs_note,
        "capture_s": capture_s,
        "weights_gb": weights / 1e9,
        "copy_bandwidth_gb_s": bandwidth / 1e9,
        "bound_tok_s": bound,
        "modes": modes,
        "eagle3": eagle,
        "tests": {"ran": False, "why": "--no-tests"} if args.no_tests else run_cuda_tests(),
    }
    report["seconds"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
