"""SmolLM2 for `dojo demo` and `dojo serve`: solutions.system.load in the workspace's cache, with a
progress bar on stderr while a first run builds the cache.
"""

from __future__ import annotations

from collections.abc import Callable

from dojo.practice import report


def load_smollm2(mode: str, log: Callable[[str], None], **model_kwargs):
    """SmolLM2 and its tokenizer (a solutions.system.loading.weights_cache.Loaded) in weights `mode`;
    `model_kwargs` (attention_fn, cache_cls) go to the model. Raises as solutions.system.load."""
    import solutions.system
    from dojo.targets import workspace_dir

    shown = {}  # the bar and its task, made on the first report: a warm start builds nothing, imports no rich.progress

    def progress(done: int, total: int) -> None:
        if not shown:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            columns = (
                TextColumn(f"preparing SmolLM2-135M ({mode}, first run)"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} tensors"),
                TimeElapsedColumn(),
            )
            shown["bar"] = Progress(
                *columns, console=report.console(stderr=True), transient=True, auto_refresh=False
            )
            shown["bar"].start()
            shown["task"] = shown["bar"].add_task("load", total=total)
        shown["bar"].update(shown["task"], completed=done, total=total, refresh=True)

    try:
        return solutions.system.load(
            mode, workspace_dir() / "cache" / "smollm2", log=log, progress=progress, **model_kwargs
        )
    finally:
        if shown:
            shown["bar"].stop()
