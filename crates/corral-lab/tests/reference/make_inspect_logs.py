"""Makes two Inspect AI eval logs for corral-lab's `inspect` tests: a tiny task run on Inspect's
`mockllm/model` (answering "Default output from mockllm/model" offline), scored by `includes()`.

Usage: make_inspect_logs.py LOG_DIR. The baseline's targets are met on 4 of 12 samples, the
candidate's on all 12, over 2 epochs each. Prints {"baseline": path, "candidate": path}.

Exit 3 (with the reason on stderr) when inspect-ai is missing: a missing prerequisite.
"""

import json
import sys

try:
    from inspect_ai import Task, eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import includes
    from inspect_ai.solver import generate
except ImportError as e:  # pragma: no cover - the prerequisite check
    print(f"missing python module: {e}", file=sys.stderr)
    sys.exit(3)

ANSWER = "Default output from mockllm/model"


def task(name, passing):
    samples = [
        Sample(id=f"q{i:02}", input=f"question {i}", target=ANSWER if i in passing else "no")
        for i in range(12)
    ]
    return Task(name=name, dataset=samples, solver=generate(), scorer=includes())


def answer(_input, _tools, _tool_choice, _config):
    # Usage given, so mockllm does not count tokens (that would fetch a tokenizer over the
    # network): the run stays offline.
    out = ModelOutput.from_content(model="mockllm", content=ANSWER)
    out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return out


def main():
    log_dir = sys.argv[1]
    out = {}
    for side, passing in (("baseline", {0, 3, 6, 9}), ("candidate", set(range(12)))):
        [log] = inspect_eval(
            task(f"tiny_{side}", passing),
            model=get_model("mockllm/model", custom_outputs=answer),
            epochs=2,
            log_dir=log_dir,
            log_format="eval",
            display="none",
        )
        if log.status != "success":
            print(f"the {side} eval ended {log.status}: {log.error}", file=sys.stderr)
            sys.exit(1)
        out[side] = log.location
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
