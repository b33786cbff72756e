"""Array type aliases shared by the mechanism modules."""

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[Any]
ArrayLike = npt.ArrayLike
