"""A ZeRO-1 checkpoint written by 2 ranks resumes on 1 rank, and one written by 1 rank on 2: the resumed engine
holds the saved fp32 weights and Adam moments (compared per tensor with the fragments in the saved shards), and
the run trains on from the checkpoint's step. Run as the script of each rank (run_ranks), this file is the worker
that starts the engine as `pretrain` does and compares."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from pretrain.data.loader import DataState, redistribute
from pretrain_cli import run_ranks

SETTINGS = ["--preset", "tiny", "--set", "seq_len=32", "--set", "global_batch=8", "--set", "micro_batch=4",
            "--set", "log_every=1", "--set", "steps=6", "--set", "warmup=0", "--set", "lr=1e-2",
            "--set", "zero_stage=1", "--set", "loader_workers=0"]


def saved_tensors(tag_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    """{"fp32" | "exp_avg" | "exp_avg_sq": {parameter name: flat tensor}} from the ZeRO shards: each tensor is the
    concatenation of its fragments in the ranks' partitions, where DeepSpeed's param_slice_mappings place them."""
    pieces: dict[str, dict[str, list]] = {"fp32": {}, "exp_avg": {}, "exp_avg_sq": {}}
    for shard in sorted(tag_dir.glob("zero_pp_rank_*_mp_rank_00_optim_states.pt"),
                        key=lambda p: int(p.name.split("_")[3])):
        sd = torch.load(shard, map_location="cpu", weights_only=False)["optimizer_state_dict"]
        states = sd["base_optimizer_state"]["state"]
        for group, mapping in enumerate(sd["param_slice_mappings"]):
            flat = {"fp32": sd["single_partition_of_fp32_groups"][group], **states[group]}
            for name, address in mapping.items():
                for key in pieces:
                    pieces[key].setdefault(name, []).append(flat[key].narrow(0, address.start, address.numel))
    return {key: {name: torch.cat(parts) for name, parts in by_name.items()} for key, by_name in pieces.items()}


def worker(data: str, out: str, result: str) -> None:
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

    from pretrain.config import load_train_config
    from pretrain.run.prepare import prepare
    from pretrain.run.train import start

    overrides = [v for flag, v in zip(SETTINGS[2::2], SETTINGS[3::2]) if flag == "--set"]
    run = prepare("phase1", Path(data), Path(out), load_train_config("phase1", overrides=overrides,
                                                                     values={"preset": "tiny"}))
    started = start(run)
    saved = saved_tensors(run.resume.path)
    worst = {key: 0.0 for key in saved}
    for name, p in started.engine.module.named_parameters():
        for key in saved:
            now = (safe_get_full_fp32_param(p) if key == "fp32" else safe_get_full_optimizer_state(p, key))
            worst[key] = max(worst[key], float((now.flatten() - saved[key][name]).abs().max()))
    if torch.distributed.get_rank() == 0:
        Path(result).write_text(json.dumps({"step": started.step, "worst": worst,
                                            "moments_nonzero": float(saved["exp_avg"][name].abs().max())}))


def test_redistribute_deals_out_the_unfinished_files_of_the_earliest_epoch():
    states = [DataState(2, ("a", "b", "c"), 1, 5),  # in b: b is read again from its first row
              DataState(2, ("d", "e"), 2, 0),  # done with epoch 2 (not yet moved on)
              DataState(3, ("f", "g"), 0, 3)]  # already in epoch 3: its epoch-2 files are done
    assert redistribute(states, 1) == [DataState(2, ("b", "c"), 0, 0)]
    assert redistribute(states, 3) == [DataState(2, ("b",), 0, 0), DataState(2, ("c",), 0, 0),
                                       DataState(2, (), 0, 0)]  # nothing left: straight on to epoch 3


@pytest.mark.slow
@pytest.mark.parametrize("before, after", [(2, 1), (1, 2)])
def test_a_zero1_checkpoint_resumes_on_another_number_of_ranks(tmp_path, before, after, write_dataset):
    data = write_dataset(tmp_path / "work", [40, 40, 40], seq_len=32)
    cli = ["-m", "pretrain.cli", "phase1", "--data", str(data), "--out", str(tmp_path / "run"), *SETTINGS]
    first = run_ranks(before, *cli, "--set", "steps_this_run=3")
    assert first.returncode == 0, first.stderr[-3000:]

    check = run_ranks(after, __file__, str(data), str(tmp_path / "run"), str(tmp_path / "result.json"))
    assert check.returncode == 0, check.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["step"] == 3 and result["moments_nonzero"] > 0
    assert result["worst"] == {"fp32": 0.0, "exp_avg": 0.0, "exp_avg_sq": 0.0}, result  # bit for bit

    second = run_ranks(after, *cli)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"written by {before} rank(s), resumed on {after}" in second.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "phase1" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(0 < r["loss"] < 20 for r in rows)


if __name__ == "__main__":
    from pretrain.run.train import leave_process_groups

    worker(*sys.argv[1:])
    leave_process_groups()  # the engines' gloo threads end here, not in the interpreter's teardown
