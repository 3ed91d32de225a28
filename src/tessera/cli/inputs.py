"""The values `tessera run` feeds a model: from .npy/.npz files or seeded random.

Inputs are kept by position, not by name: two inputs can share a name once
the importer has cleaned it up (`a b` and `a_b`), and a name-keyed dict would
then leave one of them unset. A name on the command line picks the one input
it denotes, or is refused; --random-input fills every position.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TesseraError, did_you_mean

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")  # a zip with members, an empty zip

# --random-input: narrow integers over their whole range; wider ones are often
# indices or lengths, so small non-negative values keep them in range.
SMALL_INT_BOUND = 16


@dataclass(frozen=True)
class InputSpec:
    """One model input: the names it answers to (the module's, then the ONNX model's if it differs)."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def name(self) -> str:
        return self.names[0]

    def describe(self) -> str:
        return f"{'/'.join(repr(n) for n in self.names)} {self.shape} {self.dtype}"


def find_input(name: str, specs: Sequence[InputSpec], flag: str) -> int:
    """The position of the one input called `name` (each input's first name wins over its others)."""
    for rank in range(max((len(s.names) for s in specs), default=0)):
        found = [k for k, s in enumerate(specs) if rank < len(s.names) and s.names[rank] == name]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise TesseraError(f"{flag}: {len(found)} inputs are named {name!r} (positions {found}); "
                               "only --random-input can fill them")
    known = [n for s in specs for n in s.names]
    raise TesseraError(f"{flag}: the model has no input {name!r}{did_you_mean(name, known)}; "
                       f"inputs: {', '.join(s.describe() for s in specs)}")


def load_inputs(specs_given: Sequence[str], specs: Sequence[InputSpec]) -> dict[int, np.ndarray]:
    """`--input NAME=FILE` values by input position, checked against the input's shape and dtype."""
    values: dict[int, np.ndarray] = {}
    for given in specs_given:
        flag = f"--input {given!r}"
        name, sep, file = given.partition("=")
        if not sep:
            if len(specs) != 1:
                raise TesseraError(f"{flag}: name the input (NAME=FILE); inputs: "
                                   f"{', '.join(s.describe() for s in specs)}")
            position, file = 0, given
        else:
            position = find_input(name, specs, flag)
        if not file:
            raise TesseraError(f"{flag}: no file given; expected NAME=FILE.npy")
        if position in values:
            raise TesseraError(f"{flag}: input {specs[position].name!r} is given twice")
        values[position] = _checked(flag, file, _read_array(flag, file, specs[position]), specs[position])
    return values


def _read_array(flag: str, file: str, spec: InputSpec) -> np.ndarray:
    path = Path(file)
    if not path.is_file():
        raise TesseraError(f"{flag}: {'is a folder' if path.is_dir() else 'no such file'}, expected a .npy "
                           "or .npz file")
    with path.open("rb") as f:
        head = f.read(len(_NPY_MAGIC))
    if not head.startswith(_NPY_MAGIC) and not head.startswith(_ZIP_MAGICS):
        what = "is empty" if not head else "is not a NumPy file"
        raise TesseraError(f"{flag}: {file} {what}; expected a .npy file (numpy.save) or a .npz file "
                           "(numpy.savez)")
    try:
        data = np.load(path, allow_pickle=False)  # never unpickle: a pickle runs code
        if not isinstance(data, np.lib.npyio.NpzFile):
            return data
        with data:
            return _npz_member(flag, file, data, spec)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise TesseraError(f"{flag}: {file} is damaged or truncated ({err})") from None


def _npz_member(flag: str, file: str, data: np.lib.npyio.NpzFile, spec: InputSpec) -> np.ndarray:
    for name in spec.names:
        if name in data.files:
            return data[name]
    if len(data.files) == 1:
        return data[data.files[0]]
    held = ", ".join(data.files) or "no arrays"
    raise TesseraError(f"{flag}: {file} holds {held}; expected one array, or one named "
                       f"{' or '.join(repr(n) for n in spec.names)}")


def _checked(flag: str, file: str, value: np.ndarray, spec: InputSpec) -> np.ndarray:
    if value.shape != spec.shape:
        raise TesseraError(f"{flag}: {file} holds shape {value.shape}, input {spec.name!r} takes {spec.shape}")
    numeric = value.dtype.kind in "biuf" or value.dtype.name == "bfloat16"
    if not numeric or not np.can_cast(value.dtype, spec.dtype, casting="same_kind"):
        raise TesseraError(f"{flag}: {file} holds {value.dtype}, input {spec.name!r} takes {spec.dtype}")
    return np.ascontiguousarray(value, dtype=spec.dtype)


def random_value(rng: np.random.Generator, spec: InputSpec) -> np.ndarray:
    """Seeded values for an input: floats N(0, 1), booleans and integers uniform (see SMALL_INT_BOUND)."""
    dtype = spec.dtype
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return rng.standard_normal(spec.shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, spec.shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = (info.min, info.max) if dtype.itemsize == 1 else (0, SMALL_INT_BOUND - 1)
        return rng.integers(low, high, spec.shape, endpoint=True).astype(dtype)
    raise TesseraError(f"--random-input: cannot make values for input {spec.name!r} of dtype {dtype}; "
                       f"pass --input {spec.name}=FILE.npy")


def complete_inputs(given: dict[int, np.ndarray], specs: Sequence[InputSpec], random_input: bool,
                    seed: int) -> list[np.ndarray]:
    """One value per input position: the given one, or seeded random values (if allowed)."""
    rng = np.random.default_rng(seed)
    values: list[np.ndarray] = []
    for position, spec in enumerate(specs):
        if position in given:
            values.append(given[position])
        elif random_input:
            values.append(random_value(rng, spec))
        else:
            raise TesseraError(f"no value for input {spec.name!r}; pass --input {spec.name}=FILE.npy or "
                               "--random-input")
    return values
