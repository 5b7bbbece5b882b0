"""Requests to `specbench serve`, checked in full before anything reaches the engine.

A request body is untrusted JSON: any field may have any type, any size, any value. `RequestReader.read` turns
one into a `Completion` (prompt token ids, output cap, streaming flags) or raises `ApiError` naming the field:
400 for a malformed or unserviceable request, 404 for another model's name. So a bad request costs its sender a
JSON error and costs the server nothing: no traceback, no dropped connection, no engine failure.

What is checked, and why:
- numbers are JSON numbers (no booleans, strings, NaN or infinities) and integers where a count is meant;
- sampling settings equal the server's (fixed when it starts); features the engine lacks are refused rather
  than silently ignored (see serve.py);
- logprobs as vLLM takes them (vllm/entrypoints/openai/chat_completion/protocol.py and completion/protocol.py
  `check_logprobs`): chat `logprobs` true or false with `top_logprobs` 0 to MAX_LOGPROBS (and only with
  `logprobs`), completions `logprobs` 0 to MAX_LOGPROBS; vLLM's "all" (-1) and prompt logprobs are refused;
- `messages` is a list of {"role": str, "content": str | [{"type": "text", "text": str}, ...]};
- token ids given as the prompt are integers inside the vocabulary: the embedding has no row for any other;
- a prompt's length is bounded before it is tokenised: no vocabulary entry is longer than `max_piece_chars`
  characters, so text longer than 2 x max_model_len x max_piece_chars characters cannot fit the context (the
  factor 2 leaves room for normalisers that fold characters); after tokenising, the exact token count is
  checked against the context, with vLLM's wording.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specbench.runners.reference.serve_http import ApiError

MAX_LOGPROBS = 20          # vLLM's default --max-logprobs (vllm/config/model.py `max_logprobs`)
UNSUPPORTED = ("tools", "functions", "response_format", "logit_bias", "suffix", "guided_json", "guided_regex",
               "guided_choice", "structured_outputs")


@dataclass(frozen=True)
class Limits:
    """What a prompt must fit: the context, the vocabulary, and the longest vocabulary entry."""

    max_model_len: int
    vocab_size: int
    max_piece_chars: int

    @property
    def max_prompt_chars(self) -> int:
        """Text longer than this cannot be max_model_len tokens or fewer (see the module docstring)."""
        return 2 * self.max_model_len * max(self.max_piece_chars, 1)


@dataclass(frozen=True)
class Sampling:
    """The sampling settings every request is served with (fixed when the server starts)."""

    temperature: float
    top_p: float
    top_k: int


@dataclass(frozen=True)
class Completion:
    """One checked request: what the engine runs and how the answer is shaped."""

    chat: bool
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    return_token_ids: bool
    logprobs: int | None = None            # top logprobs per output token (chat top_logprobs, completions logprobs)
    tokens_as_ids: bool = False            # return_tokens_as_token_ids: logprob tokens as "token_id:N"


# -- typed fields ------------------------------------------------------------------------------------------

def number(body: dict[str, Any], key: str) -> float | None:
    """body[key] as a finite JSON number, or None when absent or null."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"`{key}` must be a number")
    if isinstance(value, int):
        if abs(value) > 2 ** 53:
            raise ApiError(400, f"`{key}` is out of range")
        return value
    if not math.isfinite(value):
        raise ApiError(400, f"`{key}` must be a finite number")
    return value


def integer(body: dict[str, Any], key: str) -> int | None:
    """body[key] as an integer (an integral float such as 16.0 too), or None when absent or null."""
    value = number(body, key)
    if value is None:
        return None
    if value != int(value):
        raise ApiError(400, f"`{key}` must be an integer")
    return int(value)


def flag(body: dict[str, Any], key: str) -> bool:
    """body[key] as a boolean (absent or null: False)."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"`{key}` must be true or false")
    return value


def unicode_text(value: str, where: str) -> str:
    """`value`, refused when it holds lone surrogates (JSON's \\ud800 escapes): tokenizers take UTF-8 only."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, f"`{where}` is not valid Unicode (it holds a lone surrogate)") from None
    return value


def context_error(max_model_len: int, detail: str, fix: str) -> ApiError:
    return ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, {detail}. "
                         f"Please reduce the length of the {fix}.")


class RequestReader:
    """Checks request bodies against one server's model name, sampling settings, limits and tokenizer."""

    def __init__(self, model_name: str, sampling: Sampling, limits: Limits, tokenizer: Any):
        self.model_name, self.sampling, self.limits, self.tokenizer = model_name, sampling, limits, tokenizer

    def read(self, body: Any, chat: bool) -> Completion:
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        self.check(body)
        asked = self.asked_tokens(body)
        prompt = self.chat_ids(body.get("messages")) if chat else self.completion_ids(body.get("prompt"))
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            raise ApiError(400, "`stream_options` must be an object")
        return Completion(chat, prompt, self.max_tokens(asked, len(prompt)), flag(body, "stream"),
                          flag(options or {}, "include_usage"), flag(body, "return_token_ids"),
                          self.logprobs(body, chat), flag(body, "return_tokens_as_token_ids"))

    # -- what this server can honour ---------------------------------------------------------------------
    def check(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ApiError(400, "`model` must be a string")
        if model not in (None, "", self.model_name):
            raise ApiError(404, f"The model `{model}` does not exist.")
        for key in ("n", "best_of"):
            if integer(body, key) not in (None, 1):
                raise ApiError(400, "specbench serve returns one choice per request (n = 1)")
        for key in UNSUPPORTED:
            if body.get(key):
                raise ApiError(400, f"`{key}` is not supported by specbench serve")
        if body.get("stop") or body.get("stop_token_ids"):
            raise ApiError(400, "stop strings / stop_token_ids are not supported by specbench serve")
        if body.get("prompt_logprobs") is not None:
            raise ApiError(400, "prompt logprobs are not supported by specbench serve")
        if body.get("ignore_eos") or body.get("echo") or (integer(body, "min_tokens") or 0) > 0:
            raise ApiError(400, "ignore_eos / echo / min_tokens are not supported by specbench serve")
        for key, neutral in (("presence_penalty", 0.0), ("frequency_penalty", 0.0), ("repetition_penalty", 1.0)):
            value = number(body, key)
            if value is not None and value != neutral:
                raise ApiError(400, f"`{key}` is not supported by specbench serve")
        for key, have in (("temperature", self.sampling.temperature), ("top_p", self.sampling.top_p)):
            value = number(body, key)
            if value is not None and abs(value - have) > 1e-6:
                raise ApiError(400, f"this server samples with {key}={have} (set when it starts); "
                                    f"the request asks for {value}")
        top_k = integer(body, "top_k")
        if top_k is not None and max(top_k, 0) != self.sampling.top_k:
            raise ApiError(400, f"this server samples with top_k={self.sampling.top_k}; the request asks for {top_k}")

    @staticmethod
    def logprobs(body: dict[str, Any], chat: bool) -> int | None:
        """How many top logprobs each output token gets, or None when the request asks for no logprobs."""
        if chat:
            top = integer(body, "top_logprobs") or 0
            wanted = flag(body, "logprobs")
            if top and not wanted:
                raise ApiError(400, "when using `top_logprobs`, `logprobs` must be set to true")
            key, value = "top_logprobs", top if wanted else None
        else:
            if body.get("top_logprobs") is not None:
                raise ApiError(400, "`top_logprobs` is a chat completions field; completions take `logprobs`: N")
            key = "logprobs"
            value = integer(body, key)
        if value is not None and not 0 <= value <= MAX_LOGPROBS:
            raise ApiError(400, f"`{key}` must be between 0 and {MAX_LOGPROBS} (this server's max_logprobs)")
        return value

    # -- the prompt --------------------------------------------------------------------------------------
    def chat_ids(self, messages: Any) -> list[int]:
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "`messages` must be a non-empty list")
        flat, chars = [], 0
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(message, dict):
                raise ApiError(400, f"`{where}` must be an object with `role` and `content`")
            role = message.get("role")
            if not isinstance(role, str) or not role:
                raise ApiError(400, f"`{where}.role` must be a non-empty string")
            unicode_text(role, f"{where}.role")
            content = self.message_text(message.get("content"), where)
            chars += len(role) + len(content)
            flat.append({"role": role, "content": content})
        self.bound(chars, "messages")
        try:
            ids = self.tokenizer.apply_chat_template(flat, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False)
        except Exception as err:                # the template is code run on the sender's input: its error is theirs
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise ApiError(400, f"the chat template cannot render these messages: {first}") from None
        return list(ids)

    @staticmethod
    def message_text(content: Any, where: str) -> str:
        """A message's content as text: a string, or a list of text parts joined."""
        if isinstance(content, str):
            return unicode_text(content, f"{where}.content")
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not (isinstance(part, dict) and part.get("type", "text") == "text"
                        and isinstance(part.get("text"), str)):
                    raise ApiError(400, f"`{where}.content[{j}]` must be a text part "
                                        '{"type": "text", "text": "..."} (specbench serve reads text only)')
                texts.append(unicode_text(part["text"], f"{where}.content[{j}].text"))
            return "".join(texts)
        raise ApiError(400, f"`{where}.content` must be a string or a list of text parts")

    def completion_ids(self, prompt: Any) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            self.bound(len(prompt), "prompt")
            unicode_text(prompt, "prompt")
            ids = list(self.tokenizer.encode(prompt))
            if not ids:
                raise ApiError(400, "`prompt` is empty")
            return ids
        if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            vocab = self.limits.vocab_size
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise ApiError(400, f"`prompt` holds token id {bad}, outside this model's vocabulary "
                                    f"(0 to {vocab - 1})")
            return list(prompt)
        raise ApiError(400, "`prompt` must be a non-empty string or a list of token ids (one prompt per request)")

    def bound(self, chars: int, what: str) -> None:
        """Refuse text that cannot fit the context, before the tokenizer spends time and memory on it."""
        limit = self.limits.max_prompt_chars
        if chars > limit:
            raise context_error(self.limits.max_model_len,
                                f"the {what} hold {chars} characters, more than that many tokens can cover "
                                f"({limit} characters at most), so they were not tokenised", what)

    # -- the output cap ----------------------------------------------------------------------------------
    @staticmethod
    def asked_tokens(body: dict[str, Any]) -> int | None:
        for key in ("max_completion_tokens", "max_tokens"):
            asked = integer(body, key)
            if asked is not None:
                if asked < 1:
                    raise ApiError(400, f"`{key}` must be at least 1")
                return asked
        return None

    def max_tokens(self, asked: int | None, n_prompt: int) -> int:
        """The request's output cap: what it asked for, or all the room the context leaves."""
        context = self.limits.max_model_len
        if n_prompt >= context:
            raise context_error(context, f"your prompt is {n_prompt} tokens, which leaves no room for a completion",
                                "prompt")
        if asked is None:
            return context - n_prompt
        if n_prompt + asked > context:
            raise context_error(context, f"you requested {n_prompt + asked} tokens ({n_prompt} in the messages, "
                                         f"{asked} in the completion)", "messages or completion")
        return asked
