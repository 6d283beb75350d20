"""Bench's last part: the server's greedy outputs, after the measured repeats so they never
perturb a timing. `bench.fingerprint` sends the bundled prompts (runner/prompts.py) at
temperature 0 and hashes each answer's token ids (the OpenAI completions API with vLLM's
`return_token_ids`; the text where a server returns no ids, said in `hashed`);
`bench.accuracy` asks the bundled arithmetic questions and scores exact matches. Both go to
outputs.json in the cell folder, redacted with the rest of it. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

from orchestrator.runner.prompts import (
    ACCURACY_TASK,
    FINGERPRINT_PROMPTS,
    FINGERPRINT_SET,
    arithmetic_questions,
)
from orchestrator.runner.protocol import StepFailed, write_json

TEXT_SHOWN = 40  # characters of each answer kept beside its hash
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_NUMBER = re.compile(r"-?\d+")


def _request(url: str, body: Optional[Dict[str, Any]], timeout: float) -> Any:
    """GET (body None) or POST JSON to `url`; the parsed answer, or StepFailed saying why."""
    data = None if body is None else json.dumps(body).encode("utf-8")
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        text = exc.read(300).decode("utf-8", "replace").strip()
        raise StepFailed("outputs: HTTP %d from %s %s" % (exc.code, url, text)) from None
    except (OSError, ValueError) as exc:
        raise StepFailed("outputs: %s from %s: %s" % (type(exc).__name__, url, exc)) from None


def served_model(base: str, timeout: float) -> str:
    """The model id the server names first on /v1/models (what completions must ask for)."""
    doc = _request(base.rstrip("/") + "/v1/models", None, timeout)
    try:
        return str(doc["data"][0]["id"])
    except (KeyError, IndexError, TypeError):
        raise StepFailed("outputs: %s/v1/models names no model" % base.rstrip("/")) from None


def complete(
    base: str, model: str, prompt: str, max_tokens: int, timeout: float
) -> Tuple[str, Optional[List[int]]]:
    """One greedy completion: (text, token ids or None where the server gives none)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
        "return_token_ids": True,  # vLLM >= 0.10: choices[0].token_ids
    }
    doc = _request(base.rstrip("/") + "/v1/completions", body, timeout)
    try:
        choice = doc["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise StepFailed("outputs: a completion without choices from %s" % base) from None
    ids = choice.get("token_ids")
    token_ids = [int(t) for t in ids] if isinstance(ids, list) else None
    return str(choice.get("text") or ""), token_ids


def answer_hash(text: str, token_ids: Optional[List[int]]) -> str:
    """sha256 (first 16 hex digits) of the token ids, else of the text."""
    data = json.dumps(token_ids) if token_ids is not None else "text:" + text
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:16]


def fingerprint(base: str, prompts: int, max_tokens: int, timeout: float) -> Dict[str, Any]:
    """The greedy outputs of the first `prompts` bundled prompts, hashed one by one."""
    model = served_model(base, timeout)
    outputs = []
    kinds = set()
    for prompt in FINGERPRINT_PROMPTS[:prompts]:
        text, ids = complete(base, model, prompt, max_tokens, timeout)
        kinds.add("token_ids" if ids is not None else "text")
        outputs.append(
            {
                "hash": answer_hash(text, ids),
                "text": text[:TEXT_SHOWN],
                "tokens": len(ids) if ids is not None else None,
            }
        )
    joined = "".join(str(o["hash"]) for o in outputs).encode("utf-8")
    return {
        "set": FINGERPRINT_SET,
        "prompts": len(outputs),
        "max_tokens": max_tokens,
        "model": model,
        "hashed": "token_ids" if kinds == {"token_ids"} else ("text" if kinds else None),
        "digest": hashlib.sha256(joined).hexdigest()[:16],
        "outputs": outputs,
    }


def first_number(text: str) -> Optional[str]:
    """The first integer in an answer ("  42.\n" -> "42"), the exact-match unit."""
    found = _NUMBER.search(text)
    return found.group(0) if found else None


def accuracy(base: str, questions: int, max_tokens: int, timeout: float) -> Dict[str, Any]:
    """The bundled arithmetic task: the share of answers whose first integer is right."""
    model = served_model(base, timeout)
    answers = []
    for prompt, expected in arithmetic_questions(questions):
        text, _ = complete(base, model, prompt, max_tokens, timeout)
        got = first_number(text)
        answers.append({"expected": expected, "got": got, "correct": got == expected})
    correct = sum(1 for a in answers if a["correct"])
    return {
        "task": ACCURACY_TASK,
        "questions": len(answers),
        "max_tokens": max_tokens,
        "correct": correct,
        "accuracy": correct / len(answers) if answers else None,
        "answers": answers,
    }


def take_outputs(bench: Dict[str, Any], path: str) -> Optional[Dict[str, Any]]:
    """Both checks a bench spec asks for, written to `path`; their summary for the bench step's
    record, or None when it asks for neither."""
    fp, acc = bench.get("fingerprint"), bench.get("accuracy")
    if not fp and not acc:
        return None
    doc: Dict[str, Any] = {}
    if fp:
        passes = [
            fingerprint(
                str(fp["url"]), int(fp["prompts"]), int(fp["max_tokens"]), float(fp["timeout"])
            )
            for _ in range(int(fp.get("passes") or 1))
        ]
        doc["fingerprint"] = passes[0]
        if len(passes) > 1:  # greedy outputs of one server, asked again: equal, or said
            doc["fingerprint"]["passes"] = [
                {"digest": p["digest"], "hashes": [o["hash"] for o in p["outputs"]]} for p in passes
            ]
            doc["fingerprint"]["stable"] = len({p["digest"] for p in passes}) == 1
    if acc:
        doc["accuracy"] = accuracy(
            str(acc["url"]), int(acc["prompts"]), int(acc["max_tokens"]), float(acc["timeout"])
        )
    write_json(path, doc)
    summary: Dict[str, Any] = {}
    if "fingerprint" in doc:
        summary["fingerprint"] = doc["fingerprint"]["digest"]
        if "stable" in doc["fingerprint"]:
            summary["stable"] = doc["fingerprint"]["stable"]
    if "accuracy" in doc:
        summary["accuracy"] = doc["accuracy"]["accuracy"]
    return summary
