"""Tasks: prompts, reference answers and reward functions, shared by samplers and learners.

A reward is a pure function of (prompt, completion text, reference), so a learner recomputes it from the
decoded text instead of trusting the sampler. Every prompt has a `prompt_id` from which any node holding the
same task configuration recovers the prompt (`Task.get`).

- `arithmetic` (built in): "a+b=" with operands in [0, task.max_operand], reference str(a+b), completion =
  digits then EOS. Partial credit: 1.0 exact, 0.1..0.4 for a well-formed wrong number (closer is more),
  up to 0.1 when the text merely starts with a number, 0 otherwise. A held-out set of operand pairs
  (chosen by a seeded hash) is never sampled for training and forms the eval prompts.
- `word_problems` (built in, `swarmnode.word_problems`): generated arithmetic word problems for small instruct
  models; math-verify plus a format term.
- `math`: problems from a JSONL file (`task.path`) or an HF `datasets` name (`task.dataset`), with a
  configurable field mapping; reward 1.0 when math-verify finds the completion's (boxed) answer equivalent to
  the reference, else 0.0.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from swarmnode.config import TaskConfig
from swarmnode.errors import ExitCode, SwarmnodeError

EVAL_EVERY = 8  # one in EVAL_EVERY items (by seeded hash) is held out for evaluation
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


class TaskError(SwarmnodeError, ValueError):
    """The task cannot be built from its configuration (missing file, bad field mapping, ...)."""

    exit_code = ExitCode.MISSING


@dataclass(frozen=True)
class Prompt:
    """One prompt: a stable id any node can resolve, the text given to the model, and the reference answer."""

    prompt_id: str
    text: str
    reference: str


class Task(ABC):
    """Prompts plus a reward function."""

    name: str

    @abstractmethod
    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        """`n` training prompts drawn with `rng` (never from the eval set)."""

    @abstractmethod
    def eval_prompts(self) -> list[Prompt]:
        """The fixed held-out prompts."""

    def validation_prompts(self) -> list[Prompt]:
        """Held-out prompts for choosing a checkpoint, disjoint from `eval_prompts()`; none unless a task has them."""
        return []

    @abstractmethod
    def get(self, prompt_id: str) -> Prompt | None:
        """The prompt with this id, or None if the id is malformed or unknown to this task."""

    @abstractmethod
    def reward(self, prompt: Prompt, completion_text: str) -> float:
        """Score of a completion in [0, 1]; pure in (prompt, completion_text)."""

    def held_out(self, prompt: Prompt) -> bool:
        """True for a prompt of the held-out evaluation split (a learner never trains on those)."""
        return False


def _held_out(seed: int, key: str) -> bool:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % EVAL_EVERY == 0


_INT = re.compile(r"\d{1,18}")


def arithmetic_reward(completion_text: str, reference: str) -> float:
    """Partial-credit score of an arithmetic answer; see the module docstring."""
    text = completion_text.strip()
    if text == reference:
        return 1.0
    target = int(reference)
    if _INT.fullmatch(text):
        return 0.1 + 0.3 * _closeness(int(text), target)
    lead = _INT.match(text)
    if lead:
        return 0.05 + 0.05 * _closeness(int(lead.group()), target)
    return 0.0


def _closeness(value: int, target: int) -> float:
    return max(0.0, 1.0 - abs(value - target) / max(2, target))


class ArithmeticTask(Task):
    """Procedurally generated addition, deterministic given `task.seed`."""

    name = "arithmetic"

    def __init__(self, max_operand: int = 9, seed: int = 0, eval_size: int = 64):
        self.max_operand = max_operand
        self.seed = seed
        self.eval_size = eval_size
        self._eval = self._build_eval()

    def _prompt(self, a: int, b: int) -> Prompt:
        return Prompt(prompt_id=f"add:{a}:{b}", text=f"{a}+{b}=", reference=str(a + b))

    def _is_eval(self, a: int, b: int) -> bool:
        return _held_out(self.seed, f"{a}:{b}")

    def _build_eval(self) -> list[Prompt]:
        rng = random.Random(f"eval:{self.seed}")
        space = (self.max_operand + 1) ** 2
        found: dict[str, Prompt] = {}
        if space <= 4 * self.eval_size * EVAL_EVERY:  # small space: enumerate all held-out pairs
            pairs = [(a, b) for a in range(self.max_operand + 1) for b in range(self.max_operand + 1)]
            rng.shuffle(pairs)
            for a, b in pairs:
                if len(found) >= self.eval_size:
                    break
                if self._is_eval(a, b):
                    found[f"{a}:{b}"] = self._prompt(a, b)
        else:
            while len(found) < self.eval_size:
                a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
                if self._is_eval(a, b):
                    found[f"{a}:{b}"] = self._prompt(a, b)
        return list(found.values())

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        out: list[Prompt] = []
        while len(out) < n:
            a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
            if not self._is_eval(a, b):
                out.append(self._prompt(a, b))
        return out

    def eval_prompts(self) -> list[Prompt]:
        return list(self._eval)

    def get(self, prompt_id: str) -> Prompt | None:
        match = re.fullmatch(r"add:(\d{1,9}):(\d{1,9})", prompt_id) if isinstance(prompt_id, str) else None
        if not match:
            return None
        a, b = int(match.group(1)), int(match.group(2))
        if a > self.max_operand or b > self.max_operand:
            return None
        return self._prompt(a, b)

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        return arithmetic_reward(completion_text, prompt.reference)

    def held_out(self, prompt: Prompt) -> bool:
        a, b = (int(x) for x in prompt.prompt_id.split(":")[1:])
        return self._is_eval(a, b)


def math_verify_reward(completion_text: str, reference: str) -> float:
    """1.0 if math-verify finds the completion's answer equivalent to `reference`, else 0.0; never raises.

    Inputs are length-capped (the completion's tail is kept: the final answer is at the end) and an answer
    whose tail holds a tower of powers, a 4+-digit exponent or a huge factorial scores 0 unparsed. math-verify's
    signal-based timeouts only work on the main thread; elsewhere they are disabled and those guards bound the work.
    """
    from math_verify import parse, verify

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
        held = [i for i in range(len(rows)) if _held_out(seed, self._ids[i])]
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


def build_task(cfg: TaskConfig) -> Task:
    """The task named by the configuration; TaskError (a ValueError) with a clear message if it cannot be built."""
    if cfg.name == "arithmetic":
        return ArithmeticTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "digitmap":
        from swarmnode.digitmap import DigitMapTask

        return DigitMapTask(digits=cfg.digits, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "math":
        if cfg.path:
            rows = load_jsonl_rows(cfg.path, cfg)
        elif cfg.dataset:
            rows = load_dataset_rows(cfg)
        else:
            raise TaskError("task.name=math needs task.path (JSONL) or task.dataset (HF datasets name)")
        return MathTask(rows, cfg.prompt_template, seed=cfg.seed, eval_size=cfg.eval_size)
    if cfg.name == "word_problems":
        from swarmnode.word_problems import WordProblemTask

        return WordProblemTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)
    raise TaskError(f"task.name {cfg.name!r}: unknown (known: arithmetic, math, digitmap, word_problems)")
