"""Scalar data types of the vyre IR and their host (NumPy) storage."""
from __future__ import annotations

import enum
import math
import re
import struct
from typing import Union

import numpy as np

from ..errors import INTEGERS, IRValidationError, shown


class DataType(enum.Enum):
    """A scalar element type. `bool` occupies one 32-bit word in a buffer; `bf16` is stored as its
    raw 16 bits (numpy.uint16) because NumPy has no bfloat16."""

    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    I8 = "i8"
    I16 = "i16"
    I32 = "i32"
    I64 = "i64"
    BOOL = "bool"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"

    def __repr__(self) -> str:
        return f"DataType.{self.name}"

    @classmethod
    def _missing_(cls, value) -> "DataType":  # DataType("float32"), DataType(np.float32): as `parse` reads them
        return cls.parse(value)

    def __str__(self) -> str:
        return self.value

    @property
    def bits(self) -> int:
        """Width of one element in a buffer, in bits."""
        return _BITS[self]

    @property
    def nbytes(self) -> int:
        """Bytes of one element in a buffer (bool occupies a 32-bit word)."""
        return self.bits // 8

    @property
    def is_int(self) -> bool:
        """Whether this is one of the eight integer types."""
        return self in _INTS

    @property
    def is_signed(self) -> bool:
        """Whether this is a signed integer type (i8, i16, i32, i64)."""
        return self in (DataType.I8, DataType.I16, DataType.I32, DataType.I64)

    @property
    def is_float(self) -> bool:
        """Whether this is f16, bf16, f32 or f64."""
        return self in (DataType.F16, DataType.BF16, DataType.F32, DataType.F64)

    @property
    def is_bool(self) -> bool:
        """Whether this is bool."""
        return self is DataType.BOOL

    @property
    def storage(self) -> np.dtype:
        """NumPy dtype of a host buffer of this type."""
        return np.dtype(_STORAGE[self])

    @property
    def min(self) -> int | float:
        """Smallest value (integers; False for bool) or most negative finite value (floats)."""
        if self.is_bool:
            return False
        if self.is_int:
            return -(1 << (self.bits - 1)) if self.is_signed else 0
        if self is DataType.BF16:
            return -bits_to_float(0x7F7F, self)
        return float(np.finfo(self.storage).min)

    @property
    def max(self) -> int | float:
        """Largest value (integers; True for bool) or largest finite value (floats)."""
        if self.is_bool:
            return True
        if self.is_int:
            return (1 << (self.bits - 1)) - 1 if self.is_signed else (1 << self.bits) - 1
        if self is DataType.BF16:
            return bits_to_float(0x7F7F, self)
        return float(np.finfo(self.storage).max)

    @classmethod
    def parse(cls, value: "DataType | str | np.dtype | type") -> "DataType":
        """The DataType named by `value`: a DataType, its short name ("u32", "f32", ...), a NumPy
        dtype, scalar type or dtype name (np.float32, np.dtype("uint8"), "float32", np.bool_),
        NumPy's sized codes, one-letter codes and the aliases of one width everywhere ("i4", "<f8",
        "f", "B", "double"), or "bfloat16" (stored as raw uint16 bits). Names of two widths ("float",
        "int", C's long "l", "<i8" against vyre's 8-bit "i8") are refused with the choice to make."""
        if isinstance(value, DataType):
            return value
        if isinstance(value, str):
            hit = _BY_NAME.get(value) or _by_code(value)
            if hit is not None:
                return hit
            raise IRValidationError(f"unknown data type {shown(value)}. Fix: {_name_fix(value)}.")
        if value is not None and not isinstance(value, (bool, int, float)):
            try:
                dt = np.dtype(value)
            except Exception:  # noqa: BLE001 - NumPy's refusals, a nested list's RecursionError, a raising repr
                dt = None
            if dt is not None and dt.name in _BY_NAME and dt.byteorder in "=|<":
                return _BY_NAME[dt.name]
            if dt is not None and getattr(value, "__name__", "") == "bfloat16" or str(dt) == "bfloat16":
                return DataType.BF16
            if dt is not None and dt.name in _BY_NAME:
                raise IRValidationError(
                    f"data type {shown(value)} is big-endian; vyre buffers hold little-endian values. Fix: use "
                    f"{_BY_NAME[dt.name].value!r}, and convert such an array with "
                    f"a.astype(a.dtype.newbyteorder('<')).")
        raise IRValidationError(f"unknown data type {shown(value)}. Fix: use one of {_NAMES}, or a NumPy dtype "
                                "of those (np.float32, 'uint8', ...).")


_NAMES = ", ".join(d.value for d in DataType)
_CODE = re.compile(r"([<=|>]?)([iu][124]|f[248])\Z")  # NumPy's sized codes: 'i4', '<f8', 'u1'; one width everywhere
_CLASH = re.compile(r"[<=|>]([iu])8\Z")  # NumPy's 8-byte ints, spelt as vyre's 8-bit 'i8'/'u8' but for a prefix
NUMPY_BOOL_CODES = ("bool_", "?", "=?", "<?", ">?", "|?", "b1", "=b1", "<b1", ">b1", "|b1")  # NumPy's one-byte
# bools (a byte has no order), read as vyre's bool (a u32 word)
_ALIASES = {"half": "f16", "single": "f32", "double": "f64", "short": "i16", "ushort": "u16", "ubyte": "u8",
            "intc": "i32", "uintc": "u32", "longlong": "i64", "ulonglong": "u64",
            **dict.fromkeys(NUMPY_BOOL_CODES, "bool"),
            # NumPy's one-letter codes of one width everywhere ('l' and 'L', C's long, are ambiguous below)
            "b": "i8", "B": "u8", "h": "i16", "H": "u16", "i": "i32", "I": "u32", "q": "i64", "Q": "u64",
            "e": "f16", "f": "f32", "d": "f64"}
_AMBIGUOUS = {"l": ("i32", "i64"), "L": ("u32", "u64"), "int": ("i32", "i64"), "float": ("f32", "f64"),
              "uint": ("u32", "u64"), "long": ("i32", "i64"),
              "ulong": ("u32", "u64"), "char": ("i8", "u8"), "byte": ("i8", "u8"), "intp": ("i32", "i64"),
              "uintp": ("u32", "u64"), "int_": ("i32", "i64"), "uint_": ("u32", "u64"), "float_": ("f32", "f64"),
              "bool8": ("bool",)}  # NumPy 1's alias, gone from NumPy 2


def _by_code(text: str) -> "DataType | None":
    """The type a NumPy sized code or unambiguous alias names ('i4', '<f8', 'double'), or None."""
    if text in _ALIASES:
        return _BY_NAME[_ALIASES[text]]
    m = _CODE.match(text)
    return _BY_NAME[np.dtype(m.group(2)).name] if m and (m.group(1) != ">" or m.group(2)[1] == "1") else None


def _name_fix(text: str, names: str = _NAMES) -> str:
    """What to write instead of an unknown type name (`names`: those the caller takes)."""
    key = text.strip()
    key = key if len(key) == 1 else key.lower()  # NumPy's one-letter codes differ by case: 'F' is complex64
    if key in _AMBIGUOUS:
        meant = _AMBIGUOUS[key]
        if len(meant) > 1:
            return (f"{text!r} names different widths in C, in NumPy and on different platforms, so say which: "
                    f"{' or '.join(repr(m) for m in meant)}")
        return f"write {meant[0]!r}"
    clash = _CLASH.match(key)
    if clash:
        k = clash.group(1)
        return (f"{text!r} is NumPy's 8-byte {'signed' if k == 'i' else 'unsigned'} integer, while vyre's {k}8 is 8 "
                f"bits: say which, {k}64 or {k}8")
    m = _CODE.match(key)
    if m and m.group(1) == ">":
        return (f"vyre buffers hold little-endian values: use {_BY_NAME[np.dtype(m.group(2)).name].value!r}, and "
                "convert a big-endian array with a.astype(a.dtype.newbyteorder('<'))")
    hit = _BY_NAME.get(key) or _by_code(key)
    if hit is not None:
        return f"write {hit.value!r} (type names are lower case, without spaces)"
    return f"use one of {names}, or a NumPy dtype of those (np.float32, 'uint8', 'i4', ...)"


_INTS = frozenset(DataType(n) for n in ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64"))
_BITS = {
    DataType.U8: 8, DataType.U16: 16, DataType.U32: 32, DataType.U64: 64,
    DataType.I8: 8, DataType.I16: 16, DataType.I32: 32, DataType.I64: 64,
    DataType.BOOL: 32, DataType.F16: 16, DataType.BF16: 16, DataType.F32: 32, DataType.F64: 64,
}
_STORAGE = {
    DataType.U8: np.uint8, DataType.U16: np.uint16, DataType.U32: np.uint32, DataType.U64: np.uint64,
    DataType.I8: np.int8, DataType.I16: np.int16, DataType.I32: np.int32, DataType.I64: np.int64,
    DataType.BOOL: np.uint32, DataType.F16: np.float16, DataType.BF16: np.uint16,
    DataType.F32: np.float32, DataType.F64: np.float64,
}
_BY_NAME = {d.value: d for d in DataType}
_BY_NAME.update({np.dtype(t).name: d for d, t in _STORAGE.items() if d not in (DataType.BOOL, DataType.BF16)})
_BY_NAME.update({"bool": DataType.BOOL, "bfloat16": DataType.BF16})
_UINT_OF_BITS = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def f32_to_bf16_bits(x: np.ndarray | float) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of numbers: each rounded to f32, then to bfloat16 (nearest
    even both times, as `cast` to bf16 does); NaN stays NaN (quietened). Takes int and float
    values (scalars, lists, arrays); anything else is an IRValidationError."""
    arr = _real_array(x, "f32_to_bf16_bits", "numbers (ints or floats)", "fiu")
    with np.errstate(over="ignore"):  # past f32's range: an infinity, as the cast gives
        return _f32_to_bf16(arr.astype(np.float32))


def bf16_bits_to_f32(bits: np.ndarray | int) -> np.ndarray:
    """The float32 values (exact) of bfloat16 bit patterns: ints from 0 to 0xFFFF (scalars, lists,
    arrays); anything else is an IRValidationError."""
    arr = _real_array(bits, "bf16_bits_to_f32", "bit patterns (ints)", "iu")
    if arr.dtype != np.uint16 and arr.size and (int(arr.min()) < 0 or int(arr.max()) > 0xFFFF):
        bad = arr.min() if int(arr.min()) < 0 else arr.max()
        raise IRValidationError(f"bf16_bits_to_f32: {int(bad)} is not a 16-bit pattern. Fix: pass ints from 0 to "
                                "0xFFFF (the raw bits of bfloat16 values, e.g. a uint16 array).")
    return _bf16_to_f32(arr)


def _real_array(x, what: str, want: str, kinds: str) -> np.ndarray:
    """`x` as an array whose dtype kind is in `kinds`, else an IRValidationError: no bool, string,
    object or complex value is read as a number."""
    if isinstance(x, (str, bytes)):
        arr = None
    else:
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError, OverflowError):  # a ragged list, an int past 64 bits
            arr = None
    if arr is not None and not arr.size and not isinstance(x, np.ndarray):  # [] reads as float64: no values
        return arr.astype(np.uint16 if "f" not in kinds else np.float32)
    if arr is None or arr.dtype.kind not in kinds or arr.dtype.fields is not None:
        got = type(x).__name__ if arr is None else "ints past 64 bits or mixed values" if arr.dtype.kind == "O" \
            else str(arr.dtype)
        hint = " (convert floats holding bit patterns yourself: x.astype(np.uint16))" if arr is not None and \
            arr.dtype.kind == "f" else " of at most 64 bits (float(x) rounds a wider int)" if arr is not None and \
            arr.dtype.kind == "O" and "f" in kinds else ""
        raise IRValidationError(f"{what} takes {want}, not {shown(x, 60)} ({got}). Fix: pass "
                                f"{'ints or floats' if 'f' in kinds else 'ints'}{hint}; nothing is converted silently.")
    return arr


def _f32_to_bf16(x) -> np.ndarray:
    """`f32_to_bf16_bits` unchecked, for values already float32 (or exactly so)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    # a NaN whose bits all sit in the top half is a bf16 already (one loaded, say): its bits stay, as a
    # GPU's store keeps them; another is quietened, so that dropping the low half cannot make an inf
    out = np.where(nan, np.where(u & 0xFFFF, (u >> 16) | 0x40, u >> 16), rounded)
    return out.astype(np.uint16)


def _bf16_to_f32(bits) -> np.ndarray:
    """`bf16_bits_to_f32` unchecked, for bit patterns already in range."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _typed(dtype, kind: str, what: str) -> "DataType":
    """`dtype` (a DataType, or anything DataType.parse takes) as a DataType of `kind` ("float" or
    "int"), else an IRValidationError."""
    dtype = DataType.parse(dtype)
    if not getattr(dtype, f"is_{kind}"):
        a, example, other = ("a float", "f32", "wrap_int for integer types") if kind == "float" else \
            ("an integer", "u32", "float_to_bits for float types")
        raise IRValidationError(f"{what} takes {a} type, and {dtype} is not one. Fix: pass one (e.g. {example!r}), "
                                f"or use {other}.")
    return dtype


def _number(value, what: str, integral: bool):
    """`value` if it is an int (or, unless `integral`, a float), NumPy's included, and no bool."""
    kinds = INTEGERS if integral else (*INTEGERS, float, np.floating)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kinds):  # INTEGERS holds no time span
        want, fix = ("an integer", "int(x) of an integral x") if integral else ("a number", "a float or an int")
        raise IRValidationError(f"{what} takes {want}, not {shown(value)} ({type(value).__name__}). Fix: pass {fix}; "
                                "nothing is converted silently.")
    return value


def float_to_bits(value: float, dtype: "DataType | str") -> int:
    """Round a number to the float type `dtype` (nearest even; beyond its range: inf) and return
    its bit pattern. Ints and long doubles are rounded once, from their exact value (into bf16
    through f32, as `cast` does)."""
    dtype = _typed(dtype, "float", "float_to_bits")
    value = _number(value, "float_to_bits", False)
    if dtype is DataType.F64:
        return struct.unpack("<Q", struct.pack("<d", _nearest_f64(value)))[0]
    wide = _odd_f64(value)  # to odd at f64 (53 bits >= 24 + 2), so the one rounding to the type below is exact
    if dtype is DataType.BF16:
        with np.errstate(over="ignore"):
            return int(_f32_to_bf16(np.float32(wide)))
    with np.errstate(over="ignore"):
        arr = np.array([wide], dtype=dtype.storage)
    return int(arr.view(_UINT_OF_BITS[dtype.bits])[0])


def overflows(value, bits: int, dtype: DataType) -> bool:
    """Whether the finite number `value` became an infinity `bits` when rounded to float type `dtype`."""
    finite = isinstance(value, INTEGERS) or bool(np.isfinite(value))
    return finite and bits & ~(1 << (dtype.bits - 1)) == float_to_bits(math.inf, dtype)


def _nearest_f64(value) -> float:
    """`value` (an int or float, NumPy's included) rounded once to a Python float."""
    if isinstance(value, INTEGERS):
        try:
            return float(int(value))
        except OverflowError:  # an int beyond every float: rounds to +-inf, as IEEE does (and as ir.lit)
            return math.inf if value > 0 else -math.inf
    with np.errstate(over="ignore"):
        return float(np.float64(value))


def _odd_f64(value) -> float:
    """`value` rounded to f64 to odd: the nearest f64, stepped to its odd neighbour toward
    `value` where it is inexact and even, so rounding it again to a narrower type rounds once."""
    f = _nearest_f64(value)
    if not math.isfinite(f):
        return f
    if isinstance(value, INTEGERS):
        value = int(value)
        gap = value - int(f)
    elif isinstance(value, np.floating) and value.dtype.itemsize > 8:
        gap = value - np.longdouble(f)
    else:
        return f  # already an f64
    if gap and not struct.unpack("<Q", struct.pack("<d", f))[0] & 1:
        f = math.nextafter(f, math.inf if gap > 0 else -math.inf)
    return f


def bits_to_float(bits: int, dtype: "DataType | str") -> float:
    """The float value of a bit pattern of the float type `dtype`."""
    dtype = _typed(dtype, "float", "bits_to_float")
    _number(bits, "bits_to_float", True)
    if not 0 <= bits < 1 << dtype.bits:
        raise IRValidationError(f"bits_to_float: {bits} is not a {dtype.bits}-bit pattern. Fix: pass an int in "
                                f"[0, 2**{dtype.bits}).")
    if dtype is DataType.BF16:
        return float(_bf16_to_f32(bits))
    arr = np.array([bits], dtype=_UINT_OF_BITS[dtype.bits])
    return float(arr.view(dtype.storage)[0])


def wrap_int(value: int, dtype: "DataType | str") -> int:
    """Reduce an integer modulo 2^bits into the range of the integer type `dtype`."""
    dtype = _typed(dtype, "int", "wrap_int")
    mask = (1 << dtype.bits) - 1
    v = int(_number(value, "wrap_int", True)) & mask
    if dtype.is_signed and v >> (dtype.bits - 1):
        v -= 1 << dtype.bits
    return v


TypeLike = Union[DataType, str, type, np.dtype]  # a type wherever one is taken: DataType.F32, "f32", np.float32
