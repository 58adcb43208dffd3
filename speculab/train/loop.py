"""The training loop shared by the drafter trainers: schedule, time limit, checkpoints, progress.

Knows: AdamW with linear warm-up and linear decay, gradient clipping by value
(the EAGLE recipe), a wall-clock limit (``max_minutes``: the run stops
cleanly, saves, and can be resumed; it is the total over resumed runs),
periodic checkpoints that ``resume`` continues from (model, optimiser, step,
loss history), a checkpoint at Ctrl-C or SIGTERM too (a sitting ends without losing the
steps since the last one), a progress bar, and the loss log
(``DIR/train_log.jsonl``).

Does not know: what is trained or what the loss is: ``step_fn(batch) ->
(loss, metrics)`` comes from the caller.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import Tensor, nn
from tqdm import tqdm

from speculab.jsonl import read_records

CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"


@dataclass(frozen=True)
class LoopConfig:
    steps: int
    lr: float = 1e-3
    warmup_steps: int = 50
    betas: tuple[float, float] = (0.9, 0.95)
    weight_decay: float = 0.0
    clip_value: float = 0.5
    checkpoint_every: int = 50
    max_minutes: float | None = None
    log_every: int = 1


def lr_at(step: int, cfg: LoopConfig, elapsed_s: float = 0.0) -> float:
    """Linear warm-up, then linear decay to 5% by the last step or the end of the time limit, whichever comes first."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    by_steps = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    by_time = elapsed_s / (cfg.max_minutes * 60) if cfg.max_minutes else 0.0
    return cfg.lr * max(0.05, 1 - max(by_steps, by_time))


@dataclass
class LoopResult:
    steps_done: int
    finished: bool  # False when the time limit stopped it early
    seconds: float
    history: list[dict]


def _save(out: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int, seconds: float) -> None:
    tmp = out / (CHECKPOINT + ".tmp")
    # the random state too: noise and sampled positions continue as if the run had never stopped
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "seconds": seconds, "rng": torch.get_rng_state()}
    torch.save(state, tmp)
    tmp.replace(out / CHECKPOINT)  # a kill mid-save never leaves a broken checkpoint


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _stop_on_sigterm():
    """SIGTERM raises KeyboardInterrupt while training (a background run ignores SIGINT, so a kill is how a sitting
    ends it); returns the handler it replaced, None off the main thread, where handlers cannot be set."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupt)


def read_log(out: Path) -> list[dict]:
    return read_records(out / LOG)


def run(
    model: nn.Module,
    batches: Callable[[int], Iterator],  # step to start from -> batches from that step on
    step_fn: Callable[[object], tuple[Tensor, dict]],
    cfg: LoopConfig,
    out: Path,
    resume: bool = False,
    desc: str = "train",
) -> LoopResult:
    out.mkdir(parents=True, exist_ok=True)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    step, spent = 0, 0.0
    history = []
    if resume and (out / CHECKPOINT).exists():
        state = torch.load(out / CHECKPOINT, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, spent = state["step"], state["seconds"]
        if "rng" in state:  # checkpoints written before it was kept have none
            torch.set_rng_state(state["rng"])
        history = [h for h in read_log(out) if h["step"] <= step]
    (out / LOG).write_text("".join(json.dumps(h) + "\n" for h in history))
    (out / "loop_config.json").write_text(json.dumps(asdict(cfg), indent=1))
    started = time.perf_counter() - spent
    limit = cfg.max_minutes * 60 if cfg.max_minutes else float("inf")
    finished = True
    model.train()
    previous = _stop_on_sigterm()
    try:  # Ctrl-C or a kill (the end of a sitting) keeps every step done: --resume goes on from the last
        with tqdm(total=cfg.steps, initial=step, desc=desc, unit="step") as bar, (out / LOG).open("a") as log:
            for batch in batches(step):
                if step >= cfg.steps:
                    break
                if time.perf_counter() - started >= limit:
                    finished = False
                    break
                lr = lr_at(step, cfg, time.perf_counter() - started)
                for group in opt.param_groups:
                    group["lr"] = lr
                loss, metrics = step_fn(batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_value_(params, cfg.clip_value)
                opt.step()
                step += 1
                row = {
                    "step": step,
                    "seconds": round(time.perf_counter() - started, 2),
                    "lr": lr,
                    "loss": float(loss.detach()),
                    **{k: float(v) for k, v in metrics.items()},
                }
                history.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                bar.update(1)
                bar.set_postfix({k: f"{v:.3f}" for k, v in row.items() if k in ("loss", "top1")})
                if step % cfg.checkpoint_every == 0:
                    _save(out, model, opt, step, time.perf_counter() - started)
            else:
                finished = step >= cfg.steps
    except KeyboardInterrupt:
        _save(out, model, opt, step, time.perf_counter() - started)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    seconds = time.perf_counter() - started
    _save(out, model, opt, step, seconds)
    model.eval()
    return LoopResult(step, finished and step >= cfg.steps, seconds, history)
