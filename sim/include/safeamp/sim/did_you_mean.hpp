// "Did you mean ...?" for mistyped words: the tool's subcommands and options, and a scenario file's keys and
// names. Typos on a keyboard are mostly one wrong, missing, extra or swapped letter, so the distance counts an
// adjacent swap as one edit ("plna" -> "plan"). The one implementation both use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace safeamp::sim {

/// Edits (insert, delete, substitute, swap two adjacent letters) that turn `typed` into `known`: the optimal
/// string alignment distance, O(|typed| |known|) in time and memory (the words are short).
[[nodiscard]] inline std::size_t typo_distance(std::string_view typed, std::string_view known) {
  const std::size_t rows = typed.size() + 1;
  const std::size_t cols = known.size() + 1;
  std::vector<std::size_t> d(rows * cols);  // d[i * cols + j]: distance between typed[0, i) and known[0, j)
  const auto at = [&d, cols](std::size_t i, std::size_t j) -> std::size_t& { return d[i * cols + j]; };
  for (std::size_t i = 0; i < rows; ++i) at(i, 0) = i;
  for (std::size_t j = 0; j < cols; ++j) at(0, j) = j;
  for (std::size_t i = 1; i < rows; ++i) {
    for (std::size_t j = 1; j < cols; ++j) {
      const bool same = typed[i - 1] == known[j - 1];
      std::size_t best = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + (same ? 0 : 1)});
      if (i > 1 && j > 1 && typed[i - 1] == known[j - 2] && typed[i - 2] == known[j - 1]) {
        best = std::min(best, at(i - 2, j - 2) + 1);
      }
      at(i, j) = best;
    }
  }
  return at(rows - 1, cols - 1);
}

/// The word of `known` closest to `typed` when it is a likely typo, else empty. Leading dashes are ignored when
/// measuring ("--sede" is two edits from "--seed" only if "sede" is), and at most one edit per three letters of
/// the longer word is allowed (at least one, at most three), so "plna" suggests "plan" but "x" suggests nothing.
/// Ties go to the earlier word of `known`.
[[nodiscard]] inline std::string did_you_mean(std::string_view typed, const std::vector<std::string>& known) {
  const auto undashed = [](std::string_view w) { return w.substr(std::min(w.find_first_not_of('-'), w.size())); };
  const std::string_view word = undashed(typed);
  std::string best;
  std::size_t best_edits = 0;
  for (const std::string& candidate : known) {
    const std::string_view name = undashed(candidate);
    const std::size_t edits = typo_distance(word, name);
    const std::size_t allowed = std::clamp<std::size_t>(std::max(word.size(), name.size()) / 3, 1, 3);
    if (edits <= allowed && (best.empty() || edits < best_edits)) {
      best = candidate;
      best_edits = edits;
    }
  }
  return best;
}

}  // namespace safeamp::sim
