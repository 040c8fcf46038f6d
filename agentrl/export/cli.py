"""``agentrl export`` (registered by ``agentrl.cli``)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)


def export_cmd(
    source: str = typer.Argument(
        ..., help="Run directory, saved model, or packaged model (agentrl/smollm2-135m)."
    ),
    out: str = typer.Option(..., "--out", help="Directory to write (a Hugging Face model)."),
    quantize: str = typer.Option(
        "none",
        help="none (fp32), int8 (torchao int8 weights; decodes on PyTorch's int8 kernels) or "
        "nf4 (bitsandbytes 4-bit). Needs pip install 'agentrl[quant]'.",
    ),
    weights: str = typer.Option("final", help="final, or start (the policy as RL began)."),
    force: bool = typer.Option(False, help="Replace --out if it exists."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as the last line."),
) -> None:
    """Export a trained policy (LoRA merged) as a plain Hugging Face model directory, optionally
    quantized for CPU serving; `agentrl serve OUT` and `agentrl eval OUT` load it."""
    from agentrl.export import QuantizationUnavailable, export_model

    try:
        manifest = export_model(source, out, quantize=quantize, weights=weights, force=force)
    except (OSError, ValueError, QuantizationUnavailable) as err:
        console.print(f"[bold red]error:[/] {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(2) from None
    mb, src = manifest["bytes"] / 2**20, manifest["source_bytes"]
    ratio = f" ({src / manifest['bytes']:.1f}x smaller)" if src and quantize != "none" else ""
    console.print(f"agentrl export: {escape(out)}  {quantize}, {mb:.1f} MiB{ratio}")
    if as_json:
        print(json.dumps(manifest))
