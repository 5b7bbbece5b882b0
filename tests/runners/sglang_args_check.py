"""Feeds SGLang launch commands through SGLang's own argument parser and speculative-decoding checks.

Run by tests/runners/test_sglang_args.py with the Python of a venv that has `sglang==0.5.23` (`make
test-sglang-args` builds one); it imports nothing of specbench. It reads a JSON list of commands on stdin, each
{"argv": [..., "-m", "sglang.launch_server", FLAGS...], "env": {NAME: VALUE}}, and writes a JSON list of
results, each {"ok": true, "resolved": {the speculative fields SGLang resolved}} or {"ok": false, "error": "..."}.

What runs is SGLang's: `prepare_server_args` (server_args.py: the argparse parser built from every
arg_groups/fields/*.py, so a misspelled flag, a bad type or choice fails as `sglang.launch_server` fails) and
`handle_speculative_decoding` (arg_groups/speculative_hook.py: `_handle_ngram`, `_handle_eagle_family`,
`_handle_dflash`, `_handle_dspark`, which read the draft checkpoint's config.json). The rest of
`ServerArgs.resolve_once` needs a GPU (memory, backends, kernels), so this runs only its bookkeeping (the raw
input snapshot, as arg_groups/pipeline.py `run_resolution_pipeline` takes it), declares the device the pipeline
resolves on a CUDA machine ("cuda", which the DFLASH and DSPARK checks require) and runs the page-size pass
(`_page_size_default`) that the NGRAM and EAGLE tree checks read.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

FIELDS = ("speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps", "speculative_eagle_topk",
          "speculative_dflash_block_size", "speculative_dspark_block_size", "speculative_dspark_sps_table_path",
          "speculative_draft_model_path", "tp_size")


def flags(argv: list[str]) -> list[str]:
    """The arguments after `-m sglang.launch_server`."""
    return argv[argv.index("sglang.launch_server") + 1:]


def check(argv: list[str], env: dict[str, str]) -> dict:
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.arg_groups.overrides import (
        _page_size_default, declare_resolution, resolved_view, run_post_process_pass,
    )
    from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.ragged_verify import read_ragged_verify_mode

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = prepare_server_args(flags(argv))
        args._raw_input = {f.name: getattr(args, f.name) for f in record_fields(type(args))}
        args._resolved_overrides = []
        declare_resolution(args, "specbench check: the device on a CUDA machine", device="cuda")
        run_post_process_pass(args, _page_size_default)
        handle_speculative_decoding(args)
        view = resolved_view(args)
        resolved = {name: getattr(view, name) for name in FIELDS}
        # the DSpark verify scheduler's mode, as the DSpark worker reads it (speculative/ragged_verify.py)
        resolved["ragged_verify_mode"] = read_ragged_verify_mode().value
        return {"ok": True, "resolved": resolved}
    except SystemExit:                                  # argparse: the message is on stderr
        return {"ok": False, "error": " ".join(stderr.getvalue().split()[-40:])}
    except Exception as err:  # noqa: BLE001 - any failure of SGLang's checks is the answer
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    commands = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):        # SGLang's log lines stay off the JSON answer
        results = [check(c["argv"], c.get("env", {})) for c in commands]
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
