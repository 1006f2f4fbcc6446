"""`localspec bench --quants` (bench.py holds its flags): which quantization of a model speculates best here."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from localspec.errors import LocalspecError


def run(args) -> int:
    """`bench --quants`: each quantization's verify-cost curve on this CPU, and the advice drawn from them."""
    import tempfile

    from localspec.bench import quants
    from localspec.fileio import atomic_write
    from localspec.places import cache_root

    def say(line: str) -> None:
        print(f"localspec bench: {line}", file=sys.stderr, flush=True)

    on_disk = quants.model_files(args.model)
    if not on_disk:
        name = args.model or "the default model"
        raise LocalspecError(f"no GGUF file of {name} is on disk: localspec pull {args.model or ''} first")
    have = {quants.quant_of(p): p for p in on_disk}
    wanted = [q.strip().upper() for q in args.quants.split(",") if q.strip()] or list(have)
    quants.check_names([q for q in wanted if q not in have])  # before any requantizing
    source = max(on_disk, key=lambda p: p.stat().st_size)  # the most bits: the best to requantize from
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root(), prefix="quants-") as tmp:
        files = []
        for quant in wanted:
            if quant in have:
                files.append((have[quant], False))
                continue
            say(f"{quant} is not on disk: requantizing {source.name} to it for the timing (deleted afterwards)")
            files.append((quants.requantize(source, quant, Path(tmp) / f"{quant}.gguf", args.threads), True))
        curves = quants.measure(files, rounds=args.quant_rounds, threads=args.threads, say=say)
    print("\n".join(quants.advise(curves)))
    signature = quants.cpu_signature()
    say(f"kept for `pull`'s advice: {quants.save_measured(curves, signature)}")
    if args.json_out:
        curves_json = [asdict(c) for c in curves]
        report = {"cpu": signature, "model": curves[0].model, "context": quants.CONTEXT, "curves": curves_json}
        atomic_write(Path(args.json_out), json.dumps(report, indent=1).encode(), mode=0o644)
    return 0
