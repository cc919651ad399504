// quoted_input.hpp: outside input in an error message stays short and inert whatever it holds (docs/inputs.md).
#include "safeamp/quoted_input.hpp"

#include <catch2/catch.hpp>
#include <random>
#include <string>

using safeamp::bounded_input;
using safeamp::quoted_input;

TEST_CASE("a short value is quoted as it is", "[quoted_input]") {
  CHECK(bounded_input("rtx4090") == "rtx4090");
  CHECK(quoted_input("24GB") == "'24GB'");
  CHECK(bounded_input("") == "");
  CHECK(bounded_input(std::string(80, 'x')) == std::string(80, 'x'));  // exactly the bound: nothing cut
}

TEST_CASE("control characters are written as \\xNN", "[quoted_input]") {
  CHECK(bounded_input("rtx\x1b[31m") == "rtx\\x1b[31m");
  CHECK(bounded_input(std::string("a\nb\tc\x7f", 6)) == "a\\x0ab\\x09c\\x7f");
  CHECK(bounded_input(std::string("\0z", 2)) == "\\x00z");
  CHECK(bounded_input("caf\xc3\xa9") == "caf\xc3\xa9");  // UTF-8 passes through
}

TEST_CASE("a long value is cut at the bound, escapes counted as written", "[quoted_input]") {
  CHECK(bounded_input(std::string(200, 'x')) == std::string(80, 'x') + "...");
  CHECK(bounded_input(std::string(200, 'x'), 5) == "xxxxx...");
  // 4 bytes an escape: two fit in 10, a third would not, and an escape is never split.
  CHECK(bounded_input(std::string(100, '\x01'), 10) == "\\x01\\x01...");
  CHECK(bounded_input("ab\x1b", 4) == "ab...");
}

TEST_CASE("a cut never splits a UTF-8 character", "[quoted_input]") {
  // 79 bytes, then the two bytes of U+00E9: its first byte would be the 80th, its second does not fit.
  CHECK(bounded_input(std::string(79, 'a') + "\xc3\xa9" + "b") == std::string(79, 'a') + "...");
  // 78 bytes: the whole character fits, then the cut.
  CHECK(bounded_input(std::string(78, 'a') + "\xc3\xa9" + "bb") == std::string(78, 'a') + "\xc3\xa9...");
  // A 4-byte character (U+1F600) cut after two of its bytes.
  CHECK(bounded_input(std::string(78, 'a') + "\xf0\x9f\x98\x80") == std::string(78, 'a') + "...");
}

TEST_CASE("the bound holds for any bytes", "[quoted_input]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), length(0, 400), bound(0, 120);
  for (int round = 0; round < 20000; ++round) {
    std::string text(static_cast<std::size_t>(length(rng)), '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    const auto max_chars = static_cast<std::size_t>(bound(rng));
    const std::string out = bounded_input(text, max_chars);
    INFO("round " << round);
    REQUIRE(out.size() <= max_chars + 3);
    for (const char c : out) REQUIRE(static_cast<unsigned char>(c) >= 0x20);  // nothing raw below 0x20
    for (const char c : out) REQUIRE(c != '\x7f');
  }
}
