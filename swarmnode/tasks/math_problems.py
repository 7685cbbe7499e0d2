"""The `math` task: problems from a JSONL file (`task.path`) or an HF `datasets` name (`task.dataset`), with a
configurable field mapping; reward 1.0 when math-verify finds the completion's (boxed) answer equivalent to the
reference, else 0.0. `math_verify_reward` is shared with the built-in word problems.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import threading
from pathlib import Path

from swarmnode.config import TaskConfig
from swarmnode.tasks.base import Prompt, Task, TaskError, hash_held_out

MAX_COMPLETION_CHARS = 4000  # math-verify only ever sees the tail of a completion
MAX_REFERENCE_CHARS = 1000
MATH_VERIFY_TIMEOUT_S = 5
# answers that would make sympy compute for minutes (towers of powers, huge exponents or factorials) score 0
_COSTLY = re.compile(
    r"(\^|\*\*)\s*[{(]?\s*\d{4,}"  # a 4+-digit exponent
    r"|(\^|\*\*)\s*[{(][^})]*(\^|\*\*)"  # a power inside an exponent
    r"|(\^|\*\*)\s*\w+\s*(\^|\*\*)"  # a^b^c
    r"|\d{4,}\s*!"  # a factorial of a 4+-digit number
)


def _drop_timeout_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Timeout is disabled")


def _quiet_timeout_warning() -> None:
    """math-verify warns once per module that its timeouts are off (off the main thread they are: the guards
    below bound the work instead); the warning is dropped, math-verify's other warnings stay."""
    for name in ("math_verify.parser", "math_verify.grader"):
        log = logging.getLogger(name)
        if _drop_timeout_warning not in log.filters:
            log.addFilter(_drop_timeout_warning)


def math_verify_reward(completion_text: str, reference: str) -> float:
    """1.0 if math-verify finds the completion's answer equivalent to `reference`, else 0.0; never raises.

    Inputs are length-capped (the completion's tail is kept: the final answer is at the end) and an answer
    whose tail holds a tower of powers, a 4+-digit exponent or a huge factorial scores 0 unparsed. math-verify's
    signal-based timeouts only work on the main thread; elsewhere they are disabled and those guards bound the work.
    """
    from math_verify import parse, verify  # lazy: it loads sympy (~1 s), which arithmetic-only nodes never need

    _quiet_timeout_warning()

    if not completion_text or not reference:
        return 0.0
    pred_text = completion_text[-MAX_COMPLETION_CHARS:]
    gold_text = reference[:MAX_REFERENCE_CHARS]
    if _COSTLY.search(pred_text[-200:]):
        return 0.0
    limit = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    try:
        gold = parse(f"\\boxed{{{gold_text}}}", parsing_timeout=limit)
        if not gold:
            gold = parse(gold_text, parsing_timeout=limit)
        pred = parse(pred_text, parsing_timeout=limit)
        if not gold or not pred:
            return 0.0
        return 1.0 if verify(gold, pred, timeout_seconds=limit) else 0.0
    except Exception:  # math-verify and sympy can raise almost anything on adversarial input
        return 0.0


class MathTask(Task):
    """Problems with reference answers from a JSONL file or an HF datasets split; math-verify rewards."""

    name = "math"

    def __init__(self, rows: list[tuple[str, str]], template: str, seed: int = 0, eval_size: int = 64):
        if not rows:
            raise TaskError("math task: no problems found")
        self.template = template
        self.seed = seed
        self._rows = rows
        self._ids = [self._row_id(i, p, a) for i, (p, a) in enumerate(rows)]
        held = [i for i in range(len(rows)) if hash_held_out(seed, self._ids[i])]
        held = held[: min(eval_size, len(rows) // 2)]
        held_set = set(held)
        self._eval_idx = held
        self._eval_set = held_set
        self._train_idx = [i for i in range(len(rows)) if i not in held_set]

    @staticmethod
    def _row_id(index: int, problem: str, answer: str) -> str:
        digest = hashlib.sha256(json.dumps([problem, answer]).encode()).hexdigest()[:12]
        return f"math:{index}:{digest}"

    def _prompt(self, index: int) -> Prompt:
        problem, answer = self._rows[index]
        try:
            text = self.template.format(prompt=problem)
        except (KeyError, IndexError, ValueError) as exc:
            raise TaskError(f"task.prompt_template: cannot format ({exc!r}); use {{prompt}}") from None
        return Prompt(prompt_id=self._ids[index], text=text, reference=answer)

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        pool = self._train_idx or self._eval_idx
        return [self._prompt(rng.choice(pool)) for _ in range(n)]

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(i) for i in self._eval_idx]

    def get(self, prompt_id: str) -> Prompt | None:
        match = re.fullmatch(r"math:(\d{1,12}):[0-9a-f]{12}", prompt_id) if isinstance(prompt_id, str) else None
        if not match:
            return None
        index = int(match.group(1))
        if index >= len(self._rows) or self._ids[index] != prompt_id:
            return None
        return self._prompt(index)

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return math_verify_reward(completion_text, prompt.reference)

    def held_out(self, prompt: Prompt) -> bool:
        return int(prompt.prompt_id.split(":")[1]) in self._eval_set


def _row_fields(row: object, cfg: TaskConfig, where: str) -> tuple[str, str]:
    if not isinstance(row, dict):
        raise TaskError(f"{where}: expected an object, got {type(row).__name__}")
    missing = [f for f in (cfg.prompt_field, cfg.answer_field) if f not in row]
    if missing:
        raise TaskError(
            f"{where}: no field {missing[0]!r} (fields: {', '.join(map(str, row))}); "
            "set task.prompt_field / task.answer_field"
        )
    return str(row[cfg.prompt_field]), str(row[cfg.answer_field])


def load_jsonl_rows(path: str, cfg: TaskConfig) -> list[tuple[str, str]]:
    """(problem, answer) pairs of a JSONL file, with the configured field names."""
    file = Path(path).expanduser()
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskError(f"task.path {path!r}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise TaskError(f"task.path {path!r}: not UTF-8 text") from None
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskError(f"task.path {path}:{number}: not valid JSON ({exc.msg})") from None
        rows.append(_row_fields(row, cfg, f"task.path {path}:{number}"))
    return rows


def load_dataset_rows(cfg: TaskConfig) -> list[tuple[str, str]]:
    """(problem, answer) pairs of an HF datasets split (the `datasets` package is imported lazily)."""
    try:
        import datasets
    except ImportError:
        raise TaskError("task.dataset needs the `datasets` package: pip install datasets") from None
    try:
        data = datasets.load_dataset(cfg.dataset, split=cfg.split)
    except Exception as exc:  # network, missing split, unknown name: all user-facing
        raise TaskError(f"task.dataset {cfg.dataset!r} split {cfg.split!r}: cannot load ({exc})") from None
    return [_row_fields(row, cfg, f"task.dataset {cfg.dataset} row {i}") for i, row in enumerate(data)]
