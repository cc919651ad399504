#!/usr/bin/env python3
"""Writes the .npz fixtures of the .npz reader tests (tests/sim/user/npz_test.cpp and the tool cases in
tests/sim/user/CMakeLists.txt) with numpy itself, so that the tests read what numpy.savez and
numpy.savez_compressed really write (numpy 2.4.6 made the committed files; its zipfile opens every member with
force_zip64=True). The tests read the committed files: numpy is needed only to regenerate them.

  values.npz / values_compressed.npz / values_streamed.npz  the same arrays, stored, deflated, and stored into a
      stream that cannot seek (zipfile then writes data descriptors, flag bit 3, and zero sizes in local headers):
      f4 (2, 3) float32, f8 (3,) float64, i4 (4,) int32, i8 (2, 2) int64, big (200, 64) float32 r * 64 + c,
      fortran (2, 3) float32 in Fortran order, be (2,) big-endian float32
  odd_members.npz  an array x plus a member notes.txt (not .npy) and a member fake.npy that holds text
  user_data.npz    inputs and targets: the arrays of ../../report/data/npy/user_x.npy and user_y.npy (deflated)
  bad_crc.npz      user_data.npz's arrays stored, one byte of the inputs' data changed (its CRC-32 no longer holds)
  user_weights.npz head.weight (32, 2) and head.bias (2,): 0.01 * sin(k + 1) float32
and the seed corpus of the fuzz target tests/fuzz/npz_fuzz.cpp (small archives: libFuzzer runs with -max_len=8192).
"""
import io
import math
import os
import zipfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
os.chdir(here)

values = {
    "f4": np.array([[1.5, -0.25, 3.4028234663852886e38], [1e-45, -0.0, 0.1]], dtype="<f4"),
    "f8": np.array([0.1, -2.5, 65504.0], dtype="<f8"),
    "i4": np.array([0, -1, 2147483647, -2147483648], dtype="<i4"),
    "i8": np.array([[9007199254740993, -5], [7, 1 << 40]], dtype="<i8"),
    "big": np.arange(200 * 64, dtype="<f4").reshape(200, 64),
    "fortran": np.asfortranarray(np.array([[1, 2, 3], [4, 5, 6]], dtype="<f4")),
    "be": np.array([2.0, -3.0], dtype=">f4"),
}
np.savez("values.npz", **values)
np.savez_compressed("values_compressed.npz", **values)


class write_only:
    """A stream with write() only: zipfile cannot seek back, so it writes data descriptors."""

    def __init__(self, f):
        self.f = f

    def write(self, b):
        return self.f.write(b)

    def read(self, n=-1):  # numpy.savez takes an object with read() as an open file
        raise io.UnsupportedOperation("write-only")

    def flush(self):
        pass


with open("values_streamed.npz", "wb") as f:
    np.savez(write_only(f), **values)

np.savez("odd_members.npz", x=np.array([1.0, 2.0], dtype="<f4"))
with zipfile.ZipFile("odd_members.npz", "a") as z:
    z.writestr("notes.txt", "not an array\n")
    z.writestr("fake.npy", "not a .npy file either\n")

report = os.path.join(here, "..", "..", "report", "data", "npy")
np.savez_compressed("user_data.npz", inputs=np.load(os.path.join(report, "user_x.npy")),
                    targets=np.load(os.path.join(report, "user_y.npy")))
k = np.arange(66, dtype=np.float64)
w = (0.01 * np.sin(k + 1)).astype("<f4")
np.savez("user_weights.npz", **{"head.weight": w[:64].reshape(32, 2), "head.bias": w[64:]})

np.savez("bad_crc.npz", inputs=np.load(os.path.join(report, "user_x.npy")),
         targets=np.load(os.path.join(report, "user_y.npy")))
with open("bad_crc.npz", "r+b") as f:
    f.seek(300)  # inside inputs.npy's data (local header ~61 bytes, .npy header 128 bytes)
    b = f.read(1)
    f.seek(300)
    f.write(bytes([b[0] ^ 0x40]))

corpus = os.path.join(here, "..", "..", "..", "fuzz", "corpus", "npz")
os.makedirs(corpus, exist_ok=True)
small = {k: values[k] for k in ("f4", "f8", "i4", "i8", "fortran", "be")}
np.savez(os.path.join(corpus, "small.npz"), **small)
np.savez_compressed(os.path.join(corpus, "small_compressed.npz"), **small)
with open(os.path.join(corpus, "small_streamed.npz"), "wb") as f:
    np.savez(write_only(f), **small)
np.savez_compressed(os.path.join(corpus, "one_array.npz"), np.arange(300, dtype="<f4").reshape(30, 10))
for name in ("odd_members.npz", "user_weights.npz"):
    with open(name, "rb") as src, open(os.path.join(corpus, name), "wb") as dst:
        dst.write(src.read())
