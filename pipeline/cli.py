"""`pipeline` command line: run, stage, status (and the commands other modules register here)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from pipeline.config import ConfigError, default_config_path, load_pipeline_config
from pipeline.errors import PipelineError
from pipeline.log import setup_logging

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Turn a Wikipedia dump into BERT pretraining data.")

LangOpt = typer.Option(..., "--lang", help="Wikipedia language code (hu, en, fi, ...)")
WorkdirOpt = typer.Option(Path("data"), "--workdir", help="Work directory; stage outputs go to <workdir>/<lang>/<stage>/")
ConfigOpt = typer.Option(None, "--config", help="stages.yaml to use (default: ./stages.yaml, else the bundled one)")
DumpOpt = typer.Option(None, "--dump", help="Dump to use: local path, file:// or http(s):// URL (default: resolve from Wikimedia)")
SetOpt = typer.Option(None, "--set", help="Override a parameter: STAGE.KEY=VALUE (repeatable)")
WorkersOpt = typer.Option(1, "--workers", min=1, help="Worker processes for parallel stages")
ForceOpt = typer.Option(False, "--force", help="Re-run stages even when their outputs are up to date")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress bars; only warnings and errors on stderr")


@app.command()
def run(lang: str = LangOpt, dump: Optional[str] = DumpOpt, workdir: Path = WorkdirOpt,
        from_stage: Optional[str] = typer.Option(None, "--from", help="First stage to run"),
        to_stage: Optional[str] = typer.Option(None, "--to", help="Last stage to run"),
        set_: Optional[list[str]] = SetOpt, workers: int = WorkersOpt, force: bool = ForceOpt,
        quiet: bool = QuietOpt, config: Optional[Path] = ConfigOpt) -> None:
    """Run the stages of stages.yaml in order, skipping those already done."""
    from pipeline.runner import run_stages

    pcfg, lang_dir, log = _prepare(lang, dump, workdir, set_, quiet, config)
    order = pcfg.stage_order
    start = _index(order, from_stage, "--from") if from_stage else 0
    end = _index(order, to_stage, "--to") if to_stage else len(order) - 1
    if start > end:
        raise ConfigError(f"--from {from_stage} comes after --to {to_stage} in {pcfg.path}")
    run_stages(pcfg, lang_dir, order[start:end + 1], workers=workers, force=force, quiet=quiet, log=log)


@app.command()
def stage(name: str = typer.Argument(..., help="Stage to run"), lang: str = LangOpt, dump: Optional[str] = DumpOpt,
          workdir: Path = WorkdirOpt, set_: Optional[list[str]] = SetOpt, workers: int = WorkersOpt,
          force: bool = ForceOpt, quiet: bool = QuietOpt, config: Optional[Path] = ConfigOpt) -> None:
    """Run one stage (its inputs must be done)."""
    from pipeline.runner import run_stages

    pcfg, lang_dir, log = _prepare(lang, dump, workdir, set_, quiet, config)
    _index(pcfg.stage_order, name, "stage")
    run_stages(pcfg, lang_dir, [name], workers=workers, force=force, quiet=quiet, log=log)


@app.command()
def status(lang: str = LangOpt, workdir: Path = WorkdirOpt, set_: Optional[list[str]] = SetOpt,
           config: Optional[Path] = ConfigOpt) -> None:
    """Print each stage's state (done / stale / missing / failed), outputs, key counts and duration."""
    from pipeline.runner import status_rows

    pcfg = load_pipeline_config(config or default_config_path(), lang, set_ or [])
    rows = status_rows(pcfg, workdir / lang)
    columns = ["stage", "state", "outputs", "counts", "duration"]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns}
    typer.echo("  ".join(c.ljust(widths[c]) for c in columns).rstrip())
    for r in rows:
        line = "  ".join(r[c].ljust(widths[c]) for c in columns).rstrip()
        typer.echo(line + (f"  ({r['reason']})" if r["state"] in ("stale", "failed") else ""))


def _prepare(lang, dump, workdir, overrides, quiet, config):
    values = {"download": {"source": dump}} if dump else None
    pcfg = load_pipeline_config(config or default_config_path(), lang, overrides or [], values)
    lang_dir = workdir / lang
    log = setup_logging(lang_dir / "pipeline.log", quiet=quiet)
    return pcfg, lang_dir, log


def _index(order: list[str], name: str, flag: str) -> int:
    if name not in order:
        raise ConfigError(f"{flag} {name}: unknown stage (stages: {', '.join(order)})")
    return order.index(name)


def main() -> None:
    try:
        app()
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted; re-run the same command to continue", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
