# Ref: IEEE Std 754-2019 §3.3 (sets of floating-point data), §3.4 (binary interchange format
#      encodings), §3.6 (interchange format parameters).
"""Binary floating-point formats shared by the floating-point units.

A :class:`FloatFormat` names the field widths of an IEEE 754 binary interchange format (or of
bfloat16, which has the same layout rules: one sign bit, a biased exponent, a trailing
significand with an implicit leading bit) and derives the constants the gateware and the
tests need from them: bias, exponent range, masks and special encodings.

The host-side helpers (:meth:`FloatFormat.numpy_dtype`, :meth:`FloatFormat.from_bits`,
:meth:`FloatFormat.to_bits`) convert between bit patterns and numpy scalars, so that reference
models read the same definition of the format as the gateware.  numpy (and ml_dtypes for
bfloat16) is imported only when they are called.
"""

import dataclasses


__all__ = ["FloatFormat", "FP16", "BF16", "FP32", "FP64", "binary_unit_signature"]


_KNOWN_NAMES = {(5, 10): "fp16", (8, 7): "bf16", (8, 23): "fp32", (11, 52): "fp64"}


@dataclasses.dataclass(frozen=True)
class FloatFormat:
    """Field widths of a binary floating-point format.

    Parameters
    ----------
    exp_bits : int
        Width ``w`` of the biased exponent field (IEEE 754-2019 §3.4), at least 2.
    man_bits : int
        Width ``t = p - 1`` of the trailing significand field, at least 1.
    name : str
        A short name for messages and test ids; derived from the widths if not given.
    """
    exp_bits: int
    man_bits: int
    # The name is a label only: two formats with the same widths are the same format.
    name: str = dataclasses.field(default="", compare=False)

    def __post_init__(self):
        for field in ("exp_bits", "man_bits"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{field} must be an integer, not {value!r}")
        # Two exponent bits are the least that leave one normal binade between the
        # reserved all-zeros (subnormal) and all-ones (inf/NaN) encodings.
        if self.exp_bits < 2:
            raise ValueError(f"exp_bits must be at least 2, not {self.exp_bits!r}")
        # A NaN needs a nonzero trailing significand to be told from an infinity.
        if self.man_bits < 1:
            raise ValueError(f"man_bits must be at least 1, not {self.man_bits!r}")
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, not {self.name!r}")
        if not self.name:
            name = _KNOWN_NAMES.get((self.exp_bits, self.man_bits),
                                    f"e{self.exp_bits}m{self.man_bits}")
            object.__setattr__(self, "name", name)

    # Field geometry (§3.4) -------------------------------------------------------------

    @property
    def width(self):
        """Total width ``k = 1 + w + t`` in bits."""
        return 1 + self.exp_bits + self.man_bits

    @property
    def precision(self):
        """Precision ``p`` in bits, the implicit leading bit included."""
        return self.man_bits + 1

    @property
    def bias(self):
        """Exponent bias ``emax`` (§3.3)."""
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def emax(self):
        return self.bias

    @property
    def emin(self):
        """``1 - emax`` (§3.3): the exponent of the smallest normal number."""
        return 1 - self.emax

    @property
    def exp_max(self):
        """The all-ones biased exponent field value, reserved for infinities and NaNs."""
        return (1 << self.exp_bits) - 1

    @property
    def man_mask(self):
        return (1 << self.man_bits) - 1

    @property
    def exp_mask(self):
        """Mask of the exponent field, in place."""
        return self.exp_max << self.man_bits

    @property
    def sign_mask(self):
        return 1 << (self.width - 1)

    # Special encodings ------------------------------------------------------------------

    def inf(self, sign=0):
        return (sign << (self.width - 1)) | self.exp_mask

    def qnan(self, sign=0):
        """The canonical quiet NaN: all-ones exponent, only the first trailing significand
        bit set (§6.2.1 recommends that bit as the quiet flag)."""
        return self.inf(sign) | (1 << (self.man_bits - 1))

    def max_normal(self, sign=0):
        return (sign << (self.width - 1)) | ((self.exp_max - 1) << self.man_bits) | self.man_mask

    def min_normal(self, sign=0):
        return (sign << (self.width - 1)) | (1 << self.man_bits)

    def min_subnormal(self, sign=0):
        return (sign << (self.width - 1)) | 1

    def max_subnormal(self, sign=0):
        return (sign << (self.width - 1)) | self.man_mask

    def one(self, sign=0):
        return (sign << (self.width - 1)) | (self.bias << self.man_bits)

    def fields(self, bits):
        """``(sign, biased_exponent, trailing_significand)`` of a bit pattern."""
        return ((bits >> (self.width - 1)) & 1,
                (bits >> self.man_bits) & self.exp_max,
                bits & self.man_mask)

    def is_nan(self, bits):
        _sign, exp, man = self.fields(bits)
        return exp == self.exp_max and man != 0

    # Host-side conversions ------------------------------------------------------------------

    def numpy_dtype(self):
        """The numpy scalar type of this format (ml_dtypes' for bfloat16).

        Raises :exc:`ValueError` for a format numpy does not know.
        """
        import numpy as np
        if (self.exp_bits, self.man_bits) == (8, 7):
            import ml_dtypes
            return ml_dtypes.bfloat16
        dtypes = {(5, 10): np.float16, (8, 23): np.float32, (11, 52): np.float64}
        try:
            return dtypes[(self.exp_bits, self.man_bits)]
        except KeyError:
            raise ValueError(f"No numpy type for {self!r}") from None

    def _uint_dtype(self):
        import numpy as np
        return {16: np.uint16, 32: np.uint32, 64: np.uint64}[self.width]

    def from_bits(self, bits):
        """The numpy scalar (or array, for an array of integers) with bit pattern ``bits``."""
        import numpy as np
        return np.asarray(bits, dtype=self._uint_dtype()).view(self.numpy_dtype())[()]

    def to_bits(self, value):
        """The bit pattern (a Python int, or a numpy array) of a numpy scalar or array."""
        import numpy as np
        bits = np.asarray(value, dtype=self.numpy_dtype()).view(self._uint_dtype())
        return int(bits) if bits.ndim == 0 else bits


FP16 = FloatFormat(5, 10)
BF16 = FloatFormat(8, 7)
FP32 = FloatFormat(8, 23)
FP64 = FloatFormat(11, 52)


def binary_unit_signature(fmt):
    """Ports of a pipelined two-operand float unit: operands ``a``, ``b``, the pipeline
    enable ``en`` (every stage loads when it is 1, holds when 0) and ``result``."""
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    return wiring.Signature({"a": In(fmt.width), "b": In(fmt.width), "en": In(1),
                             "result": Out(fmt.width)})
