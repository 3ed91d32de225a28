"""What an exported library embeds besides its code, and how the pieces are named.

`export.py` writes these pieces and `load.py` reads them back; both take
the names and the digest from here, so the two sides cannot drift apart.

The embedded blobs: the graph JSON, the parameters, and the external
modules. The last is a parameter blob too, keyed

    module/<index>/<type key>   one saved external module
    const/<symbol>/<name>       a constant an external module owns
    provider/<type key>         the Python module that registers the type's loader
    stage                       the output stage, if any (runtime/output_stage.py)
"""

from __future__ import annotations

import hashlib
import re
import struct

BLOBS = ("graph_json", "params", "external")
EXTERNAL_KEY = re.compile(r"module/(\d+)/(.+)|const/([^/]+)/(.+)|provider/(.+)|(stage)", re.DOTALL)
EXTERNAL_KEY_FORMS = "'module/<index>/<type>', 'const/<symbol>/<name>', 'provider/<type>' or 'stage'"


def payload_digest(blobs: dict[str, bytes]) -> str:
    """SHA-256 over the embedded blobs, each framed by its name and length."""
    h = hashlib.sha256()
    for name in BLOBS:
        h.update(name.encode() + b"\0" + struct.pack("<Q", len(blobs[name])))
        h.update(blobs[name])
    return h.hexdigest()
