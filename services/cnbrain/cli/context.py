"""Where the command line finds a brain and its API key: the context `cnbrain up` writes.

`cnbrain up` writes `context.json` in its data directory (mode 0600): the URL of its first
regional brain (`url`), every regional brain's URL by region (`urls`), and the file that
holds the admin API key (`token_file`; the key itself stays there). The commands that talk
to a brain take the URL and the key from, first to last: `--url` and `--token`,
`$CNBRAIN_URL` and `$CNBRAIN_TOKEN`, the context (the file `$CNBRAIN_CONTEXT` names, else
`.cnbrain/context.json`, where `cnbrain up` keeps it by default), then
`http://127.0.0.1:8080` and `./cnbrain-admin.token` (what `cnbrain brain regional` serves
and writes where it runs).
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cnbrain.domain.errors import Invalid
from cnbrain.private_files import write_private

CONTEXT_FILE: Final = "context.json"
DEFAULT_CONTEXT: Final = Path(".cnbrain") / CONTEXT_FILE


class ContextError(Invalid):
    """The context file cannot be read; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class Context:
    url: str
    urls: dict[str, str]
    token_file: Path


def write_context(data_dir: Path, *, urls: dict[str, str], token_file: Path) -> Path:
    """Write `data_dir/context.json` for the regional brains at `urls` (by region, the first
    the default) and the key in `token_file`; its path."""
    path = data_dir / CONTEXT_FILE
    document = {"url": next(iter(urls.values())), "urls": urls, "token_file": str(token_file)}
    write_private(path, json.dumps(document, indent=2) + "\n")
    return path


def read_context() -> Context | None:
    """The context of `$CNBRAIN_CONTEXT`, else of `.cnbrain/context.json`; None when that
    file does not exist. Raises ContextError for one that cannot be read."""
    path = Path(os.environ.get("CNBRAIN_CONTEXT") or DEFAULT_CONTEXT)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ContextError(f"cannot read the context {path}: {exc}") from None
    try:
        url, urls, token_file = document["url"], document["urls"], document["token_file"]
        if not (
            isinstance(url, str)
            and isinstance(token_file, str)
            and isinstance(urls, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in urls.items())
        ):
            raise TypeError("url, urls and token_file must be text")
    except (KeyError, TypeError) as exc:
        raise ContextError(f"the context {path} is not one `cnbrain up` writes: {exc}") from None
    return Context(url=url, urls=urls, token_file=Path(token_file))
