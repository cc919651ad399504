// The .npz reader: what numpy.savez, numpy.savez_compressed and a savez into a stream that cannot seek really
// write (fixtures made by numpy, data/make_npz_fixtures.py) reads to the exact values; every broken archive
// (from those files edited byte by byte, or from the small zip writer below with zlib's deflate) is refused
// naming the file, the member and the zip field; scenarios name an array as "x.npz:name" and take initial
// weights from one archive.
#include <zlib.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "safeamp/error.hpp"
#include "safeamp/sim/file_data.hpp"
#include "safeamp/sim/npz.hpp"
#include "safeamp/sim/parameter.hpp"
#include "safeamp/sim/reference.hpp"
#include "safeamp/sim/scenario.hpp"

using namespace safeamp;
using namespace safeamp::sim;
namespace fs = std::filesystem;

namespace {

const fs::path data_dir = SAFEAMP_NPZ_DATA_DIR;

std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::uint64_t get_le(const std::string& b, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::size_t>(k)]);
  return v;
}
void put_le(std::string& b, std::size_t at, std::uint64_t v, int bytes) {
  for (int k = 0; k < bytes; ++k) b[at + static_cast<std::size_t>(k)] = static_cast<char>((v >> (8 * k)) & 0xff);
}
std::string le(std::uint64_t v, int bytes) {
  std::string s(static_cast<std::size_t>(bytes), '\0');
  put_le(s, 0, v, bytes);
  return s;
}

/// Where the fields of an archive are, found by walking it with the layout of the zip specification.
struct layout {
  std::size_t end = 0;         // end of central directory record
  std::size_t directory = 0;   // first central directory entry
  std::vector<std::size_t> entries;  // each central directory entry
};
layout layout_of(const std::string& b) {
  layout l;
  l.end = b.rfind(std::string("PK\x05\x06", 4));
  l.directory = get_le(b, l.end + 16, 4);
  std::size_t p = l.directory;
  for (std::uint64_t k = 0; k < get_le(b, l.end + 10, 2); ++k) {
    l.entries.push_back(p);
    p += 46 + get_le(b, p + 28, 2) + get_le(b, p + 30, 2) + get_le(b, p + 32, 2);
  }
  return l;
}
std::size_t entry_named(const std::string& b, const std::string& name) {
  for (const std::size_t e : layout_of(b).entries) {
    if (b.substr(e + 46, get_le(b, e + 28, 2)) == name) return e;
  }
  FAIL("no member " << name);
  return 0;
}

std::string raw_deflate(const std::string& in) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::uint32_t crc_of(const std::string& s) {
  return static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(s.size())));
}

/// A member for the small zip writer: the data is stored or deflated as `method` says (any other method number
/// is written with the data as it is); the sizes and CRC are the true ones unless overridden.
struct zip_member {
  std::string name;
  std::string data;
  std::uint16_t method = 0;
  std::uint16_t flags = 0;
  std::int64_t uncompressed_override = -1;
};

/// A plain zip archive, or with zip64 = true one whose central directory sizes and offsets are all 0xFFFFFFFF
/// with a ZIP64 extra field, and whose end records are ZIP64 (what zipfile writes past 4 GiB).
std::string zip_archive(const std::vector<zip_member>& members, bool zip64 = false) {
  std::string out, directory;
  for (const zip_member& m : members) {
    const std::string packed = m.method == 8 ? raw_deflate(m.data) : m.data;
    const std::uint64_t usize =
        m.uncompressed_override >= 0 ? static_cast<std::uint64_t>(m.uncompressed_override) : m.data.size();
    const std::uint64_t offset = out.size();
    out += "PK\x03\x04" + le(20, 2) + le(m.flags, 2) + le(m.method, 2) + le(0, 4) + le(crc_of(m.data), 4) +
           le(packed.size(), 4) + le(usize, 4) + le(m.name.size(), 2) + le(0, 2) + m.name + packed;
    const std::string extra = zip64 ? le(1, 2) + le(24, 2) + le(usize, 8) + le(packed.size(), 8) + le(offset, 8) : "";
    const std::uint64_t esc = 0xffffffff;
    directory += "PK\x01\x02" + le(45, 2) + le(45, 2) + le(m.flags, 2) + le(m.method, 2) + le(0, 4) +
                 le(crc_of(m.data), 4) + le(zip64 ? esc : packed.size(), 4) + le(zip64 ? esc : usize, 4) +
                 le(m.name.size(), 2) + le(extra.size(), 2) + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) +
                 le(zip64 ? esc : offset, 4) + m.name + extra;
  }
  const std::uint64_t directory_offset = out.size();
  out += directory;
  if (zip64) {
    const std::uint64_t record = out.size();
    out += "PK\x06\x06" + le(44, 8) + le(45, 2) + le(45, 2) + le(0, 4) + le(0, 4) + le(members.size(), 8) +
           le(members.size(), 8) + le(directory.size(), 8) + le(directory_offset, 8);
    out += "PK\x06\x07" + le(0, 4) + le(record, 8) + le(1, 4);
  }
  out += "PK\x05\x06" + le(0, 2) + le(0, 2) + le(zip64 ? 0xffff : members.size(), 2) +
         le(zip64 ? 0xffff : members.size(), 2) + le(zip64 ? 0xffffffff : directory.size(), 4) +
         le(zip64 ? 0xffffffff : directory_offset, 4) + le(0, 2);
  return out;
}

// A float32 .npy of the given values (version 1.0, header padded to 64 bytes).
std::string npy_f4(const std::vector<float>& v) {
  return npy_bytes(std::vector<std::int64_t>{static_cast<std::int64_t>(v.size())}, v);
}

std::string error_of(const std::string& bytes, const std::string& name, const npy_limits& limits = {}) {
  try {
    (void)parse_npz(bytes, name, "data.inputs 'x.npz'", limits);
  } catch (const safeamp::error& e) {
    return e.what();
  }
  return "no error";
}

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

void check_values(const std::string& bytes) {
  CHECK(parse_npz_names(bytes, "x") == std::vector<std::string>{"f4", "f8", "i4", "i8", "big", "fortran", "be"});
  const npy_array f4 = parse_npz(bytes, "f4", "x");
  REQUIRE(f4.shape == std::vector<std::int64_t>{2, 3});
  const std::vector<float> want_f4 = {1.5f, -0.25f, 3.4028234663852886e38f, 1e-45f, -0.0f, 0.1f};
  for (std::size_t i = 0; i < want_f4.size(); ++i) CHECK(bits(f4.values[i]) == bits(want_f4[i]));
  CHECK(bits(f4.values[3]) == 0x00000001u);  // the smallest subnormal, bit for bit
  CHECK(bits(f4.values[4]) == 0x80000000u);  // -0.0
  const npy_array f8 = parse_npz(bytes, "f8", "x");
  CHECK(f8.values == std::vector<float>{0.1f, -2.5f, 65504.0f});
  const npy_array i4 = parse_npz(bytes, "i4", "x");
  CHECK(i4.integers == std::vector<std::int64_t>{0, -1, 2147483647, -2147483648LL});
  const npy_array i8 = parse_npz(bytes, "i8", "x");
  CHECK(i8.integers == std::vector<std::int64_t>{9007199254740993LL, -5, 7, std::int64_t{1} << 40});
  const npy_array big = parse_npz(bytes, "big", "x");
  REQUIRE(big.shape == std::vector<std::int64_t>{200, 64});
  bool all = true;
  for (std::size_t i = 0; i < big.values.size(); ++i) all = all && big.values[i] == static_cast<float>(i);
  CHECK(all);
  CHECK(parse_npz(bytes, "fortran", "x").values == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(parse_npz(bytes, "be", "x").values == std::vector<float>{2.0f, -3.0f});
}

}  // namespace

TEST_CASE("npz: what numpy.savez and savez_compressed write reads to the exact values", "[npz]") {
  for (const char* file : {"values.npz", "values_compressed.npz", "values_streamed.npz"}) {
    INFO(file);
    const std::string bytes = file_bytes(data_dir / file);
    REQUIRE(bytes.size() > 1000);
    check_values(bytes);
    // The fixtures are what numpy writes: ZIP64 local headers (sizes 0xFFFFFFFF, force_zip64), the central
    // directory with real 32-bit sizes; method 0 or 8; the streamed one with data descriptors (flag bit 3).
    CHECK(get_le(bytes, 18, 4) == 0xffffffffu);
    CHECK(get_le(bytes, 22, 4) == 0xffffffffu);
    const std::size_t e = entry_named(bytes, "big.npy");
    CHECK(get_le(bytes, e + 10, 2) == (std::string(file) == "values_compressed.npz" ? 8u : 0u));
    CHECK((get_le(bytes, e + 8, 2) & 8u) == (std::string(file) == "values_streamed.npz" ? 8u : 0u));
    CHECK(get_le(bytes, e + 24, 4) == 200 * 64 * 4 + 128);
    // From the file: the same arrays, reading only the pieces it needs.
    CHECK(read_npz(data_dir / file, "big", "data.inputs").values == parse_npz(bytes, "big", "x").values);
    CHECK(read_npz_names(data_dir / file, "data.inputs").size() == 7);
  }
}

TEST_CASE("npz: the small zip writer's archives read, ZIP64 end records and extra fields included", "[npz]") {
  const std::string a = npy_f4({1.0f, -2.0f, 0.5f});
  const std::string b = npy_f4(std::vector<float>(5000, 3.25f));
  for (const bool zip64 : {false, true}) {
    INFO("zip64 " << zip64);
    const std::string z = zip_archive({{"a.npy", a, 0}, {"b.npy", b, 8}}, zip64);
    CHECK(parse_npz(z, "a", "x").values == std::vector<float>{1.0f, -2.0f, 0.5f});
    CHECK(parse_npz(z, "b", "x").values == std::vector<float>(5000, 3.25f));
  }
  CHECK(parse_npz_names(zip_archive({}), "x").empty());
  CHECK_THAT(error_of(zip_archive({}), "a"), Catch::Contains("array is 'a' (not in the archive); accepted: one of its "
                                                             "arrays: (none: the archive is empty)"));
}

TEST_CASE("npz: every broken archive is refused naming the file, the member and the field", "[npz]") {
  const std::string good = file_bytes(data_dir / "values.npz");
  const std::string packed = file_bytes(data_dir / "values_compressed.npz");
  using Catch::Contains;
  using Catch::Equals;

  SECTION("a missing array lists the arrays present") {
    CHECK_THAT(error_of(good, "inputs"), Contains("data.inputs 'x.npz' array is 'inputs' (not in the archive); "
                                                  "accepted: one of its arrays: f4, f8, i4, i8, big, fortran, be"));
  }
  SECTION("a changed data byte fails the CRC-32, stored or deflated") {
    std::string bad = good;
    const std::size_t e = entry_named(bad, "f8.npy");
    const std::size_t local = get_le(bad, e + 42, 4);
    const std::size_t data = local + 30 + get_le(bad, local + 26, 2) + get_le(bad, local + 28, 2);
    bad[data + 140] = static_cast<char>(bad[data + 140] ^ 0x01);  // inside the 24 data bytes after the header
    CHECK_THAT(error_of(bad, "f8"), Contains("data.inputs 'x.npz' member 'f8.npy' CRC-32 is 0x") &&
                                        Contains("as the central directory records it (the member is corrupt)"));
    std::string bad_crc = packed;
    const std::size_t pe = entry_named(bad_crc, "big.npy");
    put_le(bad_crc, pe + 16, get_le(bad_crc, pe + 16, 4) ^ 0x10000, 4);
    CHECK_THAT(error_of(bad_crc, "big"), Contains("member 'big.npy' CRC-32 is 0x"));
    CHECK_THAT(error_of(bad_crc, "f4"), Equals("no error"));  // the other members still read
  }
  SECTION("a truncated archive has no end record") {
    for (const std::size_t keep : {good.size() - 1, good.size() / 2, std::size_t{21}, std::size_t{0}}) {
      CHECK_THAT(error_of(good.substr(0, keep), "f4"), Contains("data.inputs 'x.npz' zip end of central directory is"));
    }
    CHECK_THAT(error_of(npy_f4({1.0f}), "f4"),
               Contains("zip end of central directory is not found") && Contains("numpy.savez"));
  }
  SECTION("offsets outside the archive") {
    std::string bad = good;
    put_le(bad, entry_named(bad, "i4.npy") + 42, 0x7fffff00, 4);
    CHECK_THAT(error_of(bad, "i4"), Contains("member 'i4.npy' local header offset is bytes [2147483392, "));
    bad = good;
    put_le(bad, entry_named(bad, "i4.npy") + 42, 0, 4);  // the first member's local header: another name
    CHECK_THAT(error_of(bad, "i4"), Contains("member 'i4.npy' local header name is 'f4.npy'"));
    bad = good;
    const layout l = layout_of(bad);
    put_le(bad, l.end + 16, l.directory + 1, 4);
    CHECK_THAT(error_of(bad, "f4"), Contains("zip central directory") && Contains("accepted: a range within bytes"));
    bad = good;
    put_le(bad, l.end + 10, 0xffff, 2);
    put_le(bad, l.end + 8, 0xffff, 2);
    CHECK_THAT(error_of(bad, "f4"), Contains("zip entry count is 65535"));
    bad = good;
    put_le(bad, l.entries[2] + 28, 0xfff0, 2);  // a name running past the directory
    CHECK_THAT(error_of(bad, "f4"), Contains("zip central directory entry 2 name, extra and comment lengths"));
  }
  SECTION("declared sizes: over the cap, stored sizes that disagree, a zip bomb") {
    std::string bad = good;
    put_le(bad, entry_named(bad, "big.npy") + 24, 0xfffffff0, 4);
    CHECK_THAT(error_of(bad, "big"), Contains("member 'big.npy' uncompressed size is 4294967280 bytes; accepted: "
                                              "at most 536936464 bytes"));
    CHECK_THAT(error_of(good, "big", npy_limits{.max_elements = 1000}),
               Contains("member 'big.npy' shape is more than 1000 elements"));  // under the byte cap (73552)
    bad = good;
    put_le(bad, entry_named(bad, "f4.npy") + 20, 151, 4);
    CHECK_THAT(error_of(bad, "f4"), Contains("member 'f4.npy' compressed size is 151 bytes; accepted: 152 bytes"));
    // 4 MiB of zeros deflate to a few KiB; declared as 8192 bytes, inflating stops one byte past that.
    const std::string zeros(std::size_t{4} << 20, '\0');
    const std::string bomb = zip_archive({{"z.npy", zeros, 8, 0, 8192}});
    CHECK_THAT(error_of(bomb, "z"), Contains("member 'z.npy' deflate data is inflating past the declared 8192 bytes"));
    std::string deflated = packed;
    put_le(deflated, entry_named(deflated, "big.npy") + 24, 51328 * 2, 4);  // declared larger than it inflates
    CHECK_THAT(error_of(deflated, "big"), Contains("member 'big.npy' deflate data is inflating to 51328 bytes"));
  }
  SECTION("deflate data truncated or corrupt") {
    const std::string a = npy_f4(std::vector<float>(3000, 1.5f));
    std::string z = zip_archive({{"a.npy", a, 8}});
    const std::size_t e = entry_named(z, "a.npy");
    const std::uint64_t csize = get_le(z, e + 20, 4);
    // Cut the stream: drop its last 4 bytes from the data and every size (the directory moves up by 4).
    std::string cut = z.substr(0, 30 + 5 + csize - 4) + z.substr(30 + 5 + csize);
    const layout l = layout_of(z);
    put_le(cut, l.directory - 4 + 20, csize - 4, 4);
    put_le(cut, cut.size() - 22 + 16, l.directory - 4, 4);
    put_le(cut, 18, csize - 4, 4);
    CHECK_THAT(error_of(cut, "a"), Contains("member 'a.npy' deflate data is truncated"));
    const std::string garbage = zip_archive({{"g.npy", std::string(64, '\xff'), 8}});
    std::string corrupt = garbage;
    corrupt[35] = '\xff';  // the first byte of the deflate data: block type 3 is invalid
    CHECK_THAT(error_of(corrupt, "g"), Contains("member 'g.npy' deflate data is corrupt (zlib: "));
  }
  SECTION("methods, flags, names") {
    CHECK_THAT(error_of(zip_archive({{"a.npy", npy_f4({1}), 12}}), "a"),
               Contains("member 'a.npy' zip compression method is 12; accepted: 0 (stored: numpy.savez) or 8"));
    CHECK_THAT(error_of(zip_archive({{"a.npy", npy_f4({1}), 0, 1}}), "a"),
               Contains("member 'a.npy' zip flags is encrypted"));
    CHECK_THAT(error_of(zip_archive({{"a.npy", npy_f4({1})}, {"a.npy", npy_f4({2})}}), "a"),
               Contains("member 'a.npy' is in the archive twice"));
    CHECK_THAT(error_of(zip_archive({{"a\n\x01.npy", npy_f4({1})}}), "b"),
               Contains("one of its arrays: a\\x0a\\x01"));
    const std::string odd = file_bytes(data_dir / "odd_members.npz");
    CHECK(parse_npz_names(odd, "x") == std::vector<std::string>{"x", "notes.txt", "fake"});
    CHECK(parse_npz(odd, "x", "x").values == std::vector<float>{1.0f, 2.0f});
    CHECK_THAT(error_of(odd, "notes.txt"), Contains("data.inputs 'x.npz' member 'notes.txt' is not a .npy file"));
    CHECK_THAT(error_of(odd, "fake"), Contains("data.inputs 'x.npz' member 'fake.npy' magic is not \\x93NUMPY"));
  }
}

TEST_CASE("npz: scenarios name arrays as file.npz:name and take initial weights from one archive", "[npz]") {
  const array_file_ref r = parse_array_file_ref("/d/x.npz:inputs");
  CHECK((r.path == "/d/x.npz" && r.array == "inputs" && r.archive));
  const array_file_ref n = parse_array_file_ref("/d/x.npy");
  CHECK((n.path == "/d/x.npy" && n.array.empty() && !n.archive));
  const array_file_ref bare = parse_array_file_ref("x.npz");
  CHECK((bare.path == "x.npz" && bare.array.empty() && bare.archive));
  CHECK(parse_array_file_ref("w.npz:a:b.npz:c").array == "a:b.npz:c");

  const std::string user = (data_dir / "user_data.npz").string();
  // user_data.npz holds the arrays of the .npy fixtures of the tool's user-regression case, deflated.
  const fs::path npy_dir = data_dir / ".." / ".." / "report" / "data" / "npy";
  const npy_array inputs = read_array_file(user + ":inputs", "data.inputs");
  CHECK(inputs.shape == std::vector<std::int64_t>{96, 6});
  CHECK(inputs.values == read_array_file((npy_dir / "user_x.npy").string(), "data.inputs").values);
  CHECK(read_array_file(user + ":targets", "data.targets").values ==
        read_npy(npy_dir / "user_y.npy", "data.targets").values);
  CHECK_THROWS_WITH(read_array_file(user, "data.inputs"),
                    Catch::Contains("data.inputs '" + user + "' is an archive without an array name; accepted: '" +
                                    user + ":NAME' with NAME one of its arrays: inputs, targets"));
  CHECK_THROWS_WITH(read_array_file(user + ":input", "data.inputs"),
                    Catch::Contains("data.inputs '" + user + "' array is 'input' (not in the archive)"));
  CHECK_THROWS_WITH(read_array_file((data_dir / "missing.npz").string() + ":x", "data.inputs"),
                    Catch::Contains("missing.npz' is not readable (No such file"));
  CHECK_THROWS_WITH(read_array_file(data_dir.string() + "/values.npz:big", "data.inputs", {.max_elements = 100}),
                    Catch::Contains("data.inputs '" + data_dir.string() + "/values.npz' member 'big.npy' "
                                    "shape is more than 100 elements"));

  const std::string text = file_bytes(data_dir / "user_npz.json");
  const scenario s = parse_scenario(text, (data_dir / "user_npz.json").string());
  const data_config& d = s.base.data;
  CHECK(d.inputs_path == user + ":inputs");
  REQUIRE(d.initial_weights.size() == 2);
  CHECK(d.initial_weights[0].first == "head.weight");
  CHECK(d.initial_weights[0].second == (data_dir / "user_weights.npz").string() + ":head.weight");
  CHECK(d.initial_weights[1].first == "head.bias");
  check_data_files(s.base);  // the files read and agree with the model
  // The run settings hash the archive behind "file.npz:name" (a changed archive refuses a locked reference).
  const std::size_t archive_bytes = file_bytes(data_dir / "user_data.npz").size();
  bool saw_inputs = false;
  for (const manifest_setting& m : run_settings(s.base)) {
    if (m.field != "data.inputs" && m.field.rfind("data.initial_weights.", 0) != 0) continue;
    CHECK_THAT(m.value, Catch::Contains(" bytes, fnv1a64 ") && !Catch::Contains("unreadable"));
    if (m.field == "data.inputs") {
      saw_inputs = true;
      std::string size_text = "(";  // appended, not "(" + to_string(...): GCC 12 warns a false -Wrestrict there
      size_text += std::to_string(archive_bytes) + " bytes, fnv1a64 ";
      CHECK_THAT(m.value, Catch::Contains(size_text));
    }
  }
  CHECK(saw_inputs);
  // The weights arrive as numpy wrote them: 0.01 * sin(k + 1), computed in float64 and rounded to float32.
  parameter_list params;
  (void)add_parameter(params, "head.weight", 32, 2);
  (void)add_parameter(params, "head.bias", 1, 2);
  load_initial_weights(d, params, fp32);
  for (int k = 0; k < 64; ++k) {
    CHECK(bits(params[0].value(k / 2, k % 2)) == bits(static_cast<float>(0.01 * std::sin(k + 1.0))));
  }
  CHECK(bits(params[1].value(0, 1)) == bits(static_cast<float>(0.01 * std::sin(66.0))));

  // Not an archive, or an array of one: refused with what is accepted.
  std::string other = text;
  other.replace(other.find("\"user_weights.npz\""), 18, "\"user_weights.npz:head.bias\"");
  CHECK_THROWS_WITH(parse_scenario(other, (data_dir / "x.json").string()),
                    Catch::Contains("data.initial_weights is \"user_weights.npz:head.bias\"; accepted: an object") &&
                        Catch::Contains("or the path of an .npz archive with one array per parameter name"));
}
