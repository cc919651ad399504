// The current GPU: whether one is present (device tests skip with CTest's code 77 when not), its name
// and compute capability, and which row of the core device table (safeamp/memory/devices.hpp) it is.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

#include "safeamp/memory/devices.hpp"

namespace safeamp::cuda {

/// Number of visible CUDA devices. 0 when this machine has no GPU the program could use: no device
/// (cudaErrorNoDevice), or no CUDA driver installed at all (cudaErrorInsufficientDriver or cudaErrorStubLibrary while
/// cudaDriverGetVersion reports 0). Throws cuda_error when a driver is there but the runtime cannot use it, so that a
/// GPU is never reported as absent: a driver older than the runtime (cudaErrorInsufficientDriver; the message names
/// both CUDA versions and the driver needed) or any other failure of cudaGetDeviceCount, named.
[[nodiscard]] int device_count();

namespace detail {

/// What the CUDA runtime answered: cudaGetDeviceCount's status and count, cudaDriverGetVersion's and
/// cudaRuntimeGetVersion's versions (1000 * major + 10 * minor; driver 0: no driver).
struct device_count_answer {
  int status = 0;
  int count = 0;
  int driver_version = 0;
  int runtime_version = 0;
};

/// device_count()'s rule on an answer (separate from the runtime calls so that the host tests can hand it the
/// answers of machines they are not). Throws cuda_error as device_count() does.
[[nodiscard]] int device_count_from(const device_count_answer& answer);

}  // namespace detail

struct device_info {
  std::string name;            // runtime name, e.g. "NVIDIA H100 80GB HBM3"
  int compute_capability = 0;  // 10 * major + minor, e.g. 90
  int multiprocessors = 0;
};

/// The current device (throws cuda_error when there is none).
[[nodiscard]] device_info current_device();

/// CTest's skip code, returned by device tests and benchmarks when no GPU is present.
inline constexpr int ctest_skip_code = 77;

/// The table row for a runtime device name, or nullptr when the device is not in the table. A row
/// matches when its model token (the first word, or the first two for "RTX ..." names) appears in the
/// runtime name as a whole word, and, for rows that name a memory size ("40GB"), that size does too.
/// A row naming a form factor matches only that form factor (an SXM row never takes a PCIe or NVL card, whose
/// clocks and power differ; a PCIe row never takes an NVL card).
[[nodiscard]] inline const device_spec* find_device_for_runtime_name(std::string_view runtime_name) {
  const auto upper = [](std::string_view s) {
    std::string r(s);
    for (char& ch : r) ch = (ch >= 'a' && ch <= 'z') ? static_cast<char>(ch - 'a' + 'A') : ch;
    return r;
  };
  const std::string name = upper(runtime_name);
  const auto word_at = [&name](std::string_view w) {
    for (std::size_t pos = name.find(w); pos != std::string::npos; pos = name.find(w, pos + 1)) {
      const bool left = pos == 0 || !std::isalnum(static_cast<unsigned char>(name[pos - 1]));
      const std::size_t end = pos + w.size();
      const bool right = end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]));
      if (left && right) return true;
    }
    return false;
  };
  for (const device_spec& d : device_table()) {
    const std::string row = upper(d.name);
    std::size_t cut = row.find(' ');
    if (row.rfind("RTX ", 0) == 0) cut = row.find(' ', cut + 1);
    const std::string model = row.substr(0, cut);
    if (!word_at(model)) continue;
    bool sizes_match = true;
    for (std::size_t p = row.find("GB"); p != std::string::npos; p = row.find("GB", p + 1)) {
      std::size_t b = p;
      while (b > 0 && std::isdigit(static_cast<unsigned char>(row[b - 1]))) --b;
      if (b < p && name.find(row.substr(b, p + 2 - b)) == std::string::npos) sizes_match = false;
    }
    // A row that names a form factor (SXM, PCIe, NVL) carries that card's figures and matches only that card.
    // The runtime names SXM cards without the word ("NVIDIA H100 80GB HBM3", "NVIDIA H200"), so a
    // runtime name with neither PCIe nor NVL is the SXM card.
    const auto form_factor = [](const std::string& s, bool sxm_by_default) -> std::string_view {
      if (s.find("PCIE") != std::string::npos) return "PCIE";
      if (s.find("NVL") != std::string::npos) return "NVL";
      if (s.find("SXM") != std::string::npos || sxm_by_default) return "SXM";
      return "";
    };
    const std::string_view row_form = form_factor(row, false);
    const bool form_factor_mismatch = !row_form.empty() && row_form != form_factor(name, true);
    if (sizes_match && !form_factor_mismatch) return &d;
  }
  return nullptr;
}

}  // namespace safeamp::cuda
