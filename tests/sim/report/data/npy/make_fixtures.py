#!/usr/bin/env python3
"""Writes the .npy fixtures of the bring-your-own-model tool tests (tests/sim/report/CMakeLists.txt) with the
standard library only (the tests read the committed files; Python is needed only to regenerate them):
user_x.npy (96, 6) and user_y.npy (96, 2) float32, a regression y0 = 0.5 (x0 + x1 + x2 + x3), y1 = -x0 on
x = sin(0.37 k); and one broken file per refusal the tool must name: a dtype it does not read, a row count
that disagrees, a NaN, a truncated data section, a header claiming 10^10 elements."""
import math
import struct


def npy(descr, shape, payload, fortran=False):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (descr, fortran, dims)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + payload


def f4(values):
    return struct.pack("<%df" % len(values), *values)


rows, cols = 96, 6
x = [math.sin(0.37 * (k + 1)) for k in range(rows * cols)]
y = []
for r in range(rows):
    row = x[r * cols:(r + 1) * cols]
    y += [0.5 * (row[0] + row[1] + row[2] + row[3]), -row[0]]
files = {
    "user_x.npy": npy("<f4", (rows, cols), f4(x)),
    "user_y.npy": npy("<f4", (rows, 2), f4(y)),
    "bad_dtype.npy": npy("<i2", (rows, cols), struct.pack("<%dh" % (rows * cols), *([1] * rows * cols))),
    "bad_rows.npy": npy("<f4", (rows - 1, 2), f4(y[:-2])),
    "bad_nan.npy": npy("<f4", (rows, cols), f4(x[:7] + [float("nan")] + x[8:])),
    "bad_truncated.npy": npy("<f4", (rows, cols), f4(x)[:-100]),
    "bad_huge.npy": npy("<f4", (100000, 100000), f4(x[:4])),
}
for name, data in files.items():
    with open(name, "wb") as f:
        f.write(data)
