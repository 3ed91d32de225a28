"""JSON read back from files tessera wrote: a damaged file is an ArtifactError naming it."""

from __future__ import annotations

import json

from ..errors import ArtifactError


def decode_json(data: bytes, source: str) -> object:
    """The JSON document in `data` (UTF-8); `source` names the file in errors."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{source}: not UTF-8 text (bad byte at {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
