// format_bytes prints the whole figure and its unit for every count up to UINT64_MAX and every accepted number of
// places (a 64-byte buffer cut the unit off past about 40 places, and a double quotient printed UINT64_MAX bytes as
// 18446744073709552.00 KB). Expected strings are worked by hand from the exact quotients (and agree with Python's
// decimal module, ROUND_HALF_EVEN).
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <string>

#include "safeamp/memory/bytes.hpp"

using namespace safeamp;

namespace {
constexpr std::uint64_t all_ones = std::numeric_limits<std::uint64_t>::max();  // 18446744073709551615
constexpr byte_unit every_unit[] = {byte_unit::byte, byte_unit::kb,  byte_unit::mb,  byte_unit::gb, byte_unit::tb,
                                    byte_unit::kib,  byte_unit::mib, byte_unit::gib, byte_unit::tib};
}  // namespace

TEST_CASE("format_bytes: zero in every unit") {
  CHECK(format_bytes(0, byte_unit::byte) == "0 B");
  CHECK(format_bytes(0, byte_unit::kb) == "0.00 KB");
  CHECK(format_bytes(0, byte_unit::gib) == "0.00 GiB");
  CHECK(format_bytes(0, byte_unit::gb, 0) == "0 GB");
  CHECK(format_bytes(0, byte_unit::tb, 40) == "0." + std::string(40, '0') + " TB");
}

TEST_CASE("format_bytes: the largest count, UINT64_MAX bytes, in full in every unit") {
  CHECK(format_bytes(all_ones, byte_unit::byte) == "18446744073709551615 B");
  CHECK(format_bytes(all_ones, byte_unit::byte, 40) == "18446744073709551615 B");  // bytes are integers
  // 18446744073709551.615 KB: two places leave exactly half of the last (.61|5), and 1 is odd: up.
  CHECK(format_bytes(all_ones, byte_unit::kb) == "18446744073709551.62 KB");
  CHECK(format_bytes(all_ones, byte_unit::kb, 3) == "18446744073709551.615 KB");
  CHECK(format_bytes(all_ones, byte_unit::kb, 4) == "18446744073709551.6150 KB");
  CHECK(format_bytes(all_ones, byte_unit::kb, 0) == "18446744073709552 KB");
  CHECK(format_bytes(all_ones, byte_unit::mb) == "18446744073709.55 MB");  // .55|1615
  CHECK(format_bytes(all_ones, byte_unit::gb) == "18446744073.71 GB");     // .70|9551615
  CHECK(format_bytes(all_ones, byte_unit::tb) == "18446744.07 TB");        // .07|3709551615
  CHECK(format_bytes(all_ones, byte_unit::tb, 12) == "18446744.073709551615 TB");
  CHECK(format_bytes(all_ones, byte_unit::tb, 40) == "18446744.073709551615" + std::string(28, '0') + " TB");
  // Binary units: UINT64_MAX = (2^(64-k) - 1) 2^k + (2^k - 1), so the fraction is 1 - 2^-k; two places round it up
  // and carry into the whole part.
  CHECK(format_bytes(all_ones, byte_unit::kib) == "18014398509481984.00 KiB");
  CHECK(format_bytes(all_ones, byte_unit::kib, 10) == "18014398509481983.9990234375 KiB");  // 1 - 2^-10
  CHECK(format_bytes(all_ones, byte_unit::mib) == "17592186044416.00 MiB");
  CHECK(format_bytes(all_ones, byte_unit::mib, 20) == "17592186044415.99999904632568359375 MiB");  // 1 - 2^-20
  CHECK(format_bytes(all_ones, byte_unit::gib) == "17179869184.00 GiB");
  CHECK(format_bytes(all_ones, byte_unit::gib, 30) == "17179869183.999999999068677425384521484375 GiB");
  CHECK(format_bytes(all_ones, byte_unit::tib) == "16777216.00 TiB");
  CHECK(format_bytes(all_ones, byte_unit::tib, 40) == "16777215.9999999999990905052982270717620849609375 TiB");
}

TEST_CASE("format_bytes: the ledger's largest total, 2^62 bytes") {
  constexpr std::uint64_t top = max_ledger_bytes;  // 4611686018427387904
  CHECK(format_bytes(top, byte_unit::byte) == "4611686018427387904 B");
  CHECK(format_bytes(top, byte_unit::kb) == "4611686018427387.90 KB");
  CHECK(format_bytes(top, byte_unit::gb, 3) == "4611686018.427 GB");
  CHECK(format_bytes(top, byte_unit::gib) == "4294967296.00 GiB");  // 2^32
  CHECK(format_bytes(top, byte_unit::tib) == "4194304.00 TiB");     // 2^22
}

TEST_CASE("format_bytes: rounding to nearest, ties to even, from the exact quotient") {
  CHECK(format_bytes(21'600'000'000ULL, byte_unit::gb) == "21.60 GB");
  CHECK(format_bytes(24ULL << 30, byte_unit::gb, 3) == "25.770 GB");  // 25.769|803776
  CHECK(format_bytes(1'125'000'000, byte_unit::gb) == "1.12 GB");     // 1.12|5: 2 is even
  // 1.13|5: 3 is odd, up (the double nearest 1.135 is below it: printf("%.2f") printed 1.13).
  CHECK(format_bytes(1'135'000'000, byte_unit::gb) == "1.14 GB");
  CHECK(format_bytes(2'500'000'000, byte_unit::gb, 0) == "2 GB");
  CHECK(format_bytes(3'500'000'000, byte_unit::gb, 0) == "4 GB");
  CHECK(format_bytes(1536, byte_unit::kib, 0) == "2 KiB");                 // 1.5
  CHECK(format_bytes(2560, byte_unit::kib, 0) == "2 KiB");                 // 2.5
  CHECK(format_bytes(1'500'000'001, byte_unit::gb, 0) == "2 GB");          // just above a half
  CHECK(format_bytes(999'999'999'999ULL, byte_unit::gb) == "1000.00 GB");  // the carry runs through every place
  // The finest step: one byte in TiB, 2^-40, has exactly 40 places.
  CHECK(format_bytes(1, byte_unit::tib, 40) == "0.0000000000009094947017729282379150390625 TiB");
  CHECK(format_bytes(1, byte_unit::tib, 39) == "0.000000000000909494701772928237915039062 TiB");  // ...062|5: even
}

TEST_CASE("format_bytes: every unit and every accepted number of places ends with the unit") {
  for (const std::uint64_t bytes : {std::uint64_t{0}, std::uint64_t{1}, max_ledger_bytes, all_ones}) {
    for (const byte_unit unit : every_unit) {
      for (int decimals = 0; decimals <= max_byte_decimals; ++decimals) {
        const std::string s = format_bytes(bytes, unit, decimals);
        std::string tail = " ";
        tail += unit_name(unit);
        INFO(s);
        REQUIRE(s.size() > tail.size());
        REQUIRE(s.compare(s.size() - tail.size(), tail.size(), tail) == 0);
        const std::string number = s.substr(0, s.size() - tail.size());
        const std::size_t point = number.find('.');
        if (unit == byte_unit::byte || decimals == 0) {
          REQUIRE(point == std::string::npos);
        } else {
          REQUIRE(number.size() - point - 1 == static_cast<std::size_t>(decimals));
        }
      }
    }
  }
}

TEST_CASE("format_bytes: places outside [0, 40] are refused") {
  CHECK_THROWS_WITH(format_bytes(1, byte_unit::gb, -1),
                    "format_bytes decimals is -1; accepted: an integer in [0, 40] (2^-40, a byte in TiB, has 40 "
                    "decimal places)");
  CHECK_THROWS_WITH(format_bytes(1, byte_unit::gb, 41), Catch::StartsWith("format_bytes decimals is 41; accepted"));
  CHECK_THROWS_AS(format_bytes(1, byte_unit::byte, 1000), error);
}
