"""The process of one `pretrain tune` trial (`python -m pretrain.run.tune_trial SPEC`): it ends with the `pretrain
tune` that started it, however that one ends, then measures the trial (tune.measure) and prints the figures as a
line of JSON."""
import json
import sys

from wiki2bert_core.child_processes import die_with_parent

if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    die_with_parent(spec["parent"])  # before torch and DeepSpeed load, which take seconds
    from pretrain.run.tune import measure

    print(json.dumps(measure(spec)), flush=True)
